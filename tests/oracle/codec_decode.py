"""Official codec decode, for tests/engine/test_codec_decoder.py.

usage: codec_decode.py SPEECH_TOKENIZER_DIR CODES_NPZ OUT_NPZ
CODES_NPZ holds `codes` [B, T, 16] int64. OUT_NPZ gets `audio` [B, T * 1920] float32 from
`Qwen3TTSTokenizer.decode`, and OUT_NPZ.json the official decoder's state_dict names and shapes.
"""

import json
import sys

import numpy as np
import torch
from official import load_speech_tokenizer


def main() -> None:
    folder, codes_path, out_path = sys.argv[1:4]
    tok = load_speech_tokenizer(folder)
    codes = torch.from_numpy(np.load(codes_path)["codes"]).long()
    wavs, rate = tok.decode({"audio_codes": list(codes)})
    assert rate == 24000, rate
    np.savez(out_path, audio=np.stack([np.asarray(w, dtype=np.float32) for w in wavs]))
    names = {n: list(t.shape) for n, t in tok.model.decoder.state_dict().items()}
    with open(out_path + ".json", "w") as f:
        json.dump(names, f)
    print(f"decoded {tuple(codes.shape)}")


if __name__ == "__main__":
    main()
