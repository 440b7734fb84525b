"""Official codec decode, for tests/engine/model/test_codec_decoder.py.

usage: codec_decode.py SPEECH_TOKENIZER_DIR CODES_NPZ OUT_NPZ [SPEECH_TOKENIZER_DIR CODES_NPZ OUT_NPZ ...]
Each CODES_NPZ holds `codes` [B, T, 16] int64. Its OUT_NPZ gets `audio` [B, T * samples per frame]
float32 from `Qwen3TTSTokenizer.decode`, and `audio64`, the same model's decode with every weight
and activation in float64 (what float32 rounds); OUT_NPZ.json gets the official decoder's
state_dict names and shapes. Several checkpoints in one call share one start of this interpreter.
"""

import json
import sys

import numpy as np
import torch
from official import load_speech_tokenizer


def decode(folder: str, codes_path: str, out_path: str) -> None:
    tok = load_speech_tokenizer(folder)
    codes = torch.from_numpy(np.load(codes_path)["codes"]).long()
    wavs, rate = tok.decode({"audio_codes": list(codes)})
    assert rate == 24000, rate
    audio = np.stack([np.asarray(w, dtype=np.float32) for w in wavs])
    names = {n: list(t.shape) for n, t in tok.model.decoder.state_dict().items()}
    tok.model.double()
    with torch.inference_mode():
        audio64 = torch.stack(list(tok.model.decode(codes).audio_values)).numpy()
    assert audio64.dtype == np.float64 and audio64.shape == audio.shape, (audio64.dtype, audio64.shape)
    np.savez(out_path, audio=audio, audio64=audio64)
    with open(out_path + ".json", "w") as f:
        json.dump(names, f)
    print(f"{folder}: decoded {tuple(codes.shape)}")


def main() -> None:
    args = sys.argv[1:]
    assert args and len(args) % 3 == 0, "expected SPEECH_TOKENIZER_DIR CODES_NPZ OUT_NPZ triples"
    for i in range(0, len(args), 3):
        decode(*args[i : i + 3])


if __name__ == "__main__":
    main()
