"""vLLM engine arguments for a Qwen3-TTS checkpoint folder and our EngineConfig.

vLLM reads the weights from the checkpoint folder as published, but cannot read its config.json
(model_type qwen3_tts is unknown to transformers). It gets a Qwen3 config written next to our
cache instead: the talker's decoder shape, the codec vocabulary as the token vocabulary, our
architecture name, and the checkpoint's whole talker_config for our own modules.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from voicewire.engine.config import EngineConfig
from voicewire.engine.model import checkpoint
from voicewire.engine.model.layers import DecoderConfig
from voicewire.engine.model.random_checkpoint import cache_root
from voicewire.engine.vllm import ARCHITECTURE

CPU_BLOCK_SIZE = 32  # vLLM's CPU attention needs a multiple of 32
CPU_KV_GIB = 1.0  # on CPU, vLLM would otherwise reserve most of the machine's memory


def talker_hf_config(config: dict[str, Any], max_positions: int, dtype: str) -> dict[str, Any]:
    """The Qwen3 config vLLM builds the talker's decoder from (`config`: the checkpoint's config.json)."""
    talker = config["talker_config"]
    decoder = DecoderConfig.from_dict(talker)  # our own reading, defaults included
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "qwen3",
        "hidden_size": decoder.hidden_size,
        "intermediate_size": decoder.intermediate_size,
        "num_hidden_layers": decoder.num_layers,
        "num_attention_heads": decoder.num_heads,
        "num_key_value_heads": decoder.num_kv_heads,
        "head_dim": decoder.head_dim,
        "rms_norm_eps": decoder.rms_norm_eps,
        # The checkpoint's multimodal RoPE has three equal position rows here: plain RoPE.
        "rope_parameters": {"rope_type": "default", "rope_theta": decoder.rope_theta},
        "max_position_embeddings": max_positions,
        "vocab_size": talker["vocab_size"],
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "dtype": dtype,
        "talker_config": talker,
    }


def write_hf_config(model_dir: Path, config: EngineConfig) -> Path:
    """Write the talker's vLLM config folder (cached by content); returns its path."""
    data = talker_hf_config(checkpoint.read_json(model_dir / "config.json"), config.kv_length, config.dtype)
    text = json.dumps(data, indent=1, sort_keys=True)
    folder = cache_root() / "vllm-config" / hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text)
    return folder


def engine_args(model_dir: Path, config: EngineConfig) -> dict[str, Any]:
    """Keyword arguments for vllm's AsyncEngineArgs, and the environment the workers need set."""
    settings = config.vllm
    on_cpu = config.device == "cpu"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"  # the runner hooks are written for the V1 runner
    args: dict[str, Any] = {
        "model": str(model_dir),
        "hf_config_path": str(write_hf_config(model_dir, config)),
        "skip_tokenizer_init": True,  # token ids are placeholders; the worker builds the input rows
        "generation_config": "vllm",  # our sampling runs in the runner, not vLLM's sampler
        "dtype": config.dtype,
        "max_model_len": config.kv_length,
        "max_num_seqs": settings.max_num_seqs or config.max_streams,
        "enable_prefix_caching": False,  # placeholder ids say nothing about the rows they stand for
        "async_scheduling": False,  # frames are drawn in step order; no speculative steps past a stop
        "enforce_eager": on_cpu or settings.enforce_eager,
        "worker_cls": (
            "voicewire.engine.vllm.runner.CpuTalkerWorker"
            if on_cpu
            else "voicewire.engine.vllm.runner.GpuTalkerWorker"
        ),
        "data_parallel_size": settings.data_parallel_size,
        "block_size": settings.block_size or (CPU_BLOCK_SIZE if on_cpu else None),
        "num_gpu_blocks_override": settings.num_blocks,
        "disable_log_stats": True,
    }
    kv_gib = settings.kv_cache_gib if settings.kv_cache_gib is not None or not on_cpu else CPU_KV_GIB
    if kv_gib is not None:
        args["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
    if not on_cpu:
        args["gpu_memory_utilization"] = settings.gpu_memory_utilization
    return args
