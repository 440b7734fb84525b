"""The tokenizer files `save_pretrained` writes for a checkpoint, from the processor exactly as
Qwen3TTSModel.from_pretrained loads it (its tokenizer.json is the fast tokenizer's one file).

Usage: save_tokenizer.py CHECKPOINT OUT_FOLDER
"""

import sys

import official  # noqa: F401  (shims torchaudio before qwen_tts imports)
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSProcessor
from transformers import AutoConfig, AutoProcessor


def main() -> None:
    folder, out = sys.argv[1:3]
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)
    processor = AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)
    processor.tokenizer.save_pretrained(out)


if __name__ == "__main__":
    main()
