"""Random checkpoints in the exact published Qwen3-TTS layout (`voicewire make-checkpoint`).

`tiny` is small enough for CPU tests; `0.6b` and `1.7b` have the real sizes, for speed work, and
a text tokenizer that cuts text about as Qwen2's does (bench/tokenizer.py).
The weights are random but scaled (fan-in linears, unit-variance embeddings, random codebooks):
with the usual N(0, 0.02) init and all-zero codebooks the audio comes out near-silent and ignores
the text.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from voicewire.engine.model.checkpoint import write_json
from voicewire.engine.model.weights import checkpoint_tensors, save_tensors

log = logging.getLogger(__name__)

VARIANTS = ("base", "custom_voice", "voice_design")
SIZES = ("tiny", "0.6b", "1.7b")
# What a process that loaded `--model tiny` says once: its audio is noise, by design.
TINY_WARNING = "model 'tiny' is a random checkpoint: it exercises the pipeline but does not speak words"

# Codec control ids as in the released checkpoints' config.json (`talker_config`).
CODEC_IDS = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
}
TEXT_IDS = {
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672,
    "tts_eos_token_id": 151673,
}
TEXT_VOCAB_SIZE = 151936

LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}
SPEAKERS = {"vivian": 3065, "serena": 3066, "ryan": 3061, "aiden": 2861, "eric": 2875, "dylan": 2878}
DIALECT_SPEAKERS = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}

# (talker hidden, talker mlp, talker layers, heads, kv heads, head_dim, text hidden,
#  predictor hidden, predictor mlp, predictor layers)
_TALKER_SHAPES = {
    "tiny": (64, 128, 2, 4, 2, 32, 32, 48, 96, 2),  # head_dim 32: the smallest vLLM CPU attention runs
    "0.6b": (1024, 3072, 28, 16, 8, 128, 2048, 1024, 3072, 5),
    "1.7b": (2048, 6144, 28, 16, 8, 128, 2048, 1024, 3072, 5),
}


def talker_config(size: str, variant: str) -> dict[str, Any]:
    hidden, mlp, layers, heads, kv, head_dim, text_hidden, p_hidden, p_mlp, p_layers = _TALKER_SHAPES[size]
    half = head_dim // 2
    # mrope sections split the rotary half-dim in three; positions are equal on all rows.
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]
    rope = {"interleaved": True, "mrope_section": section, "rope_type": "default", "type": "default"}
    predictor = {
        "model_type": "qwen3_tts_talker_code_predictor",
        "vocab_size": 2048,
        "hidden_size": p_hidden,
        "intermediate_size": p_mlp,
        "num_hidden_layers": p_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "attention_bias": False,
        "use_sliding_window": False,
        "num_code_groups": 16,
    }
    cfg: dict[str, Any] = {
        "model_type": "qwen3_tts_talker",
        "code_predictor_config": predictor,
        "vocab_size": 3072,
        "hidden_size": hidden,
        "intermediate_size": mlp,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "rope_scaling": rope,
        "attention_bias": False,
        "use_sliding_window": False,
        "num_code_groups": 16,
        "text_hidden_size": text_hidden,
        "text_vocab_size": TEXT_VOCAB_SIZE,
        **CODEC_IDS,
        "codec_language_id": dict(LANGUAGES),
        "spk_id": dict(SPEAKERS) if variant == "custom_voice" else {},
        "spk_is_dialect": {n: DIALECT_SPEAKERS.get(n, False) for n in SPEAKERS}
        if variant == "custom_voice"
        else {},
    }
    return cfg


def speaker_encoder_config(size: str, talker_hidden: int) -> dict[str, Any]:
    if size == "tiny":
        channels, attention, scale, se = [32, 32, 32, 32, 96], 16, 4, 16
    else:
        channels, attention, scale, se = [512, 512, 512, 512, 1536], 128, 8, 128
    return {
        "mel_dim": 128,
        "enc_dim": talker_hidden,
        "enc_channels": channels,
        "enc_kernel_sizes": [5, 3, 3, 3, 1],
        "enc_dilations": [1, 2, 3, 4, 1],
        "enc_attention_channels": attention,
        "enc_res2net_scale": scale,
        "enc_se_channels": se,
        "sample_rate": 24000,
    }


def model_config(size: str, variant: str) -> dict[str, Any]:
    talker = talker_config(size, variant)
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": {"tiny": "0b6", "0.6b": "0b6", "1.7b": "1b7"}[size],
        "tts_model_type": variant,
        **TEXT_IDS,
        "talker_config": talker,
        "torch_dtype": "float32" if size == "tiny" else "bfloat16",
    }
    if variant == "base":
        cfg["speaker_encoder_config"] = speaker_encoder_config(size, talker["hidden_size"])
    return cfg


GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "max_new_tokens": 8192,
}


# --- speech_tokenizer/ (the codec) ---------------------------------------------------------
# encoder_config is a Mimi config (owned by codec_encoder.py); decoder_config by codec_decoder.py.


def codec_encoder_config(size: str) -> dict[str, Any]:
    # The released encoder is Kyutai's Mimi as configured in its own config.json (the
    # MimiConfig defaults), with `_frame_rate` 12.5: 32 quantizers, of which 16 are used.
    cfg: dict[str, Any] = {
        "model_type": "mimi",
        "_frame_rate": 12.5,
        "sampling_rate": 24000,
        "audio_channels": 1,
        "hidden_size": 512,
        "num_filters": 64,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 6, 5, 4],
        "kernel_size": 7,
        "last_kernel_size": 3,
        "residual_kernel_size": 3,
        "dilation_growth_rate": 2,
        "use_causal_conv": True,
        "pad_mode": "constant",
        "compress": 2,
        "trim_right_ratio": 1.0,
        "codebook_size": 2048,
        "codebook_dim": 256,
        "num_quantizers": 32,
        "use_conv_shortcut": False,
        "vector_quantization_hidden_dimension": 256,
        "num_semantic_quantizers": 1,
        "upsample_groups": 512,
        "num_hidden_layers": 8,
        "intermediate_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "hidden_act": "gelu",
        "max_position_embeddings": 8000,
        "initializer_range": 0.02,
        "norm_eps": 1e-5,
        "use_cache": False,
        "use_streaming": False,
        "rope_theta": 10000.0,
        "sliding_window": 250,
        "attention_dropout": 0.0,
        "layer_scale_initial_scale": 0.01,
        "attention_bias": False,
    }
    if size == "tiny":
        # Same rates (960-sample hop, then 2x down: 1920 samples a frame), codebooks of 2048 and
        # 32 quantizers; small widths, 4 heads over 2 KV heads so grouped-query is exercised.
        cfg.update(
            hidden_size=32,
            num_filters=4,
            codebook_dim=16,
            vector_quantization_hidden_dimension=16,
            upsample_groups=32,
            num_hidden_layers=2,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
        )
    return cfg


def codec_decoder_config(size: str) -> dict[str, Any]:
    # 0.6b and 1.7b share the released speech tokenizer; these are its config.json numbers
    # (the config class defaults differ: hidden 1024 / MLP 3072, and codebook_dim has none).
    cfg: dict[str, Any] = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "latent_dim": 1024,
        "codebook_dim": 512,
        "codebook_size": 2048,
        "decoder_dim": 1536,
        "hidden_act": "silu",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "head_dim": 64,
        "num_attention_heads": 16,
        "num_hidden_layers": 8,
        "num_key_value_heads": 16,
        "num_quantizers": 16,
        "num_semantic_quantizers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000,
        "semantic_codebook_size": 4096,
        "sliding_window": 72,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "vector_quantization_hidden_dimension": 512,
    }
    if size == "tiny":
        # Same codebooks, window and upsampling (1920 samples a frame), small widths; 4 heads
        # over 2 KV heads so grouped-query attention is exercised.
        cfg.update(
            latent_dim=32,
            codebook_dim=32,
            decoder_dim=64,
            hidden_size=32,
            intermediate_size=64,
            head_dim=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=2,
            vector_quantization_hidden_dimension=32,
        )
    return cfg


def speech_tokenizer_config(size: str) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_config": codec_encoder_config(size),
        "decoder_config": codec_decoder_config(size),
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
    }


def _prefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{name}": t for name, t in tensors.items()}


def make_checkpoint(folder: str | Path, variant: str, size: str = "tiny", seed: int = 0) -> Path:
    """Write a random checkpoint of `variant` and `size` into `folder`; returns the folder."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    from voicewire.bench import tokenizer as bench_tokenizer
    from voicewire.engine.model import codec_decoder, codec_encoder, speaker_encoder, talker, text_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)

    cfg = model_config(size, variant)
    write_json(folder / "config.json", cfg)
    write_json(folder / "generation_config.json", GENERATION_CONFIG)
    model = talker.Talker(talker.TalkerConfig.from_dict(cfg["talker_config"]))
    talker.random_init_(model, gen)
    tensors = _prefixed("talker", checkpoint_tensors(model))
    if variant == "base":
        spk = speaker_encoder.SpeakerEncoder(
            speaker_encoder.SpeakerEncoderConfig.from_dict(cfg["speaker_encoder_config"])
        )
        speaker_encoder.random_init_(spk, gen)
        tensors.update(_prefixed("speaker_encoder", checkpoint_tensors(spk)))
    save_tensors(folder / "model.safetensors", tensors)
    if size == "tiny":
        text_tokenizer.write_tiny_tokenizer(folder)
    else:  # benchmarks: text splits into tokens as with Qwen2's tokenizer (bench/tokenizer.py)
        bench_tokenizer.write_bench_tokenizer(folder)

    codec_dir = folder / "speech_tokenizer"
    codec_cfg = speech_tokenizer_config(size)
    write_json(codec_dir / "config.json", codec_cfg)
    write_json(codec_dir / "preprocessor_config.json", codec_encoder.PREPROCESSOR_CONFIG)
    enc = codec_encoder.CodecEncoder(codec_encoder.CodecEncoderConfig.from_dict(codec_cfg["encoder_config"]))
    codec_encoder.random_init_(enc, gen)
    dec = codec_decoder.CodecDecoder(codec_decoder.CodecDecoderConfig.from_dict(codec_cfg["decoder_config"]))
    codec_decoder.random_init_(dec, gen)
    save_tensors(
        codec_dir / "model.safetensors",
        {**_prefixed("encoder", checkpoint_tensors(enc)), **_prefixed("decoder", checkpoint_tensors(dec))},
    )
    log.info("wrote a random %s %s checkpoint to %s", size, variant, folder)
    return folder


def cache_root() -> Path:
    """Where generated files live: $VOICEWIRE_CACHE, or ~/.cache/voicewire."""
    return Path(os.environ.get("VOICEWIRE_CACHE", Path.home() / ".cache" / "voicewire"))


# A cached checkpoint's version, bumped when what make_checkpoint writes for that size changes: v3
# gave the real sizes the tokenizer of bench/tokenizer.py; the tiny files are as in v2.
CACHE_VERSIONS = {"tiny": "v2", "0.6b": "v3", "1.7b": "v3"}


def random_checkpoint(variant: str = "custom_voice", size: str = "tiny") -> Path:
    """A random checkpoint, made once (seeded, so always the same) under the cache folder."""
    folder = cache_root() / f"{size}-{variant}-{CACHE_VERSIONS[size]}"
    if not (folder / ".complete").exists():
        make_checkpoint(folder, variant, size, seed=0)
        (folder / ".complete").touch()
    return folder


def builtin_tiny_checkpoint(variant: str = "custom_voice") -> Path:
    """The built-in `tiny` checkpoint."""
    return random_checkpoint(variant, "tiny")
