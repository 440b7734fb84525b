"""Official speech-tokenizer encode, for tests/engine/model/test_codec_encoder.py.

usage: codec_encode.py SPEECH_TOKENIZER_DIR WAVS_NPZ OUT_NPZ [RELEASED_ENCODER_CONFIG_JSON]
WAVS_NPZ holds 1-D float32 waveforms at 24 kHz (any names, any lengths). OUT_NPZ gets, per name,
`single_NAME` [T, 16] from `Qwen3TTSTokenizer.encode` of that waveform alone and `batch_NAME` from
one call on all of them (padded together); OUT_NPZ.json the official encoder's state_dict names
and shapes and its attention implementation, and (given a released-size `encoder_config` json) the
state_dict names and shapes of the official encoder built from it, on the meta device.
"""

import json
import sys

import numpy as np
import torch
from official import load_speech_tokenizer
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Encoder
from transformers import MimiConfig


def main() -> None:
    folder, wavs_path, out_path = sys.argv[1:4]
    tok = load_speech_tokenizer(folder)
    wavs = dict(np.load(wavs_path))
    out = {}
    for name, wav in wavs.items():
        (codes,) = tok.encode(wav, sr=24000).audio_codes
        out[f"single_{name}"] = codes.numpy()
    batch = tok.encode(list(wavs.values()), sr=24000).audio_codes
    for name, codes in zip(wavs, batch, strict=True):
        out[f"batch_{name}"] = codes.numpy()
    np.savez(out_path, **out)
    encoder = tok.model.encoder
    info = {
        "state_dict": {n: list(t.shape) for n, t in encoder.state_dict().items()},
        "attn_implementation": encoder.config._attn_implementation,
    }
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            released = MimiConfig(**json.load(f))
        with torch.device("meta"):
            model = Qwen3TTSTokenizerV2Encoder(released)
        info["released_state_dict"] = {n: list(t.shape) for n, t in model.state_dict().items()}
    with open(out_path + ".json", "w") as f:
        json.dump(info, f)
    print(f"encoded {len(wavs)} waveforms")


if __name__ == "__main__":
    main()
