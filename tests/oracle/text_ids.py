"""Official text tokenization: the processor exactly as Qwen3TTSModel.from_pretrained loads it.

Usage: text_ids.py CHECKPOINT TEXTS.json OUT.json  (OUT: list of id lists)
"""

import json
import sys
from pathlib import Path

import official  # noqa: F401  (shims torchaudio before qwen_tts imports)
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSProcessor
from transformers import AutoConfig, AutoProcessor


def main() -> None:
    folder, texts_path, out_path = sys.argv[1:4]
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)
    processor = AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)
    texts = json.loads(Path(texts_path).read_text())
    ids = [processor(text=t, return_tensors="pt", padding=True)["input_ids"][0].tolist() for t in texts]
    Path(out_path).write_text(json.dumps(ids))


if __name__ == "__main__":
    main()
