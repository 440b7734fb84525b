"""Imports Qwen's official qwen-tts under the oracle interpreter; shared by the oracle scripts.

Run directly with --check to verify the oracle venv. Never imported by our own package.
"""

import importlib.util
import sys
import types
import warnings


def _shim_torchaudio() -> None:
    # qwen-tts imports torchaudio.compliance.kaldi (pure Python) only; torchaudio's __init__
    # would load compiled libraries that do not match the CPU torch, so bypass it.
    spec = importlib.util.find_spec("torchaudio")
    if spec is None or "torchaudio" in sys.modules:
        return
    pkg = types.ModuleType("torchaudio")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    sys.modules["torchaudio"] = pkg


_shim_torchaudio()
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from qwen_tts import Qwen3TTSModel, Qwen3TTSTokenizer  # noqa: E402

torch.set_num_threads(2)

__all__ = ["Qwen3TTSModel", "Qwen3TTSTokenizer", "load_model", "load_speech_tokenizer"]


def load_model(path: str) -> "Qwen3TTSModel":
    return Qwen3TTSModel.from_pretrained(path, dtype=torch.float32, device_map="cpu")


def load_speech_tokenizer(path: str) -> "Qwen3TTSTokenizer":
    return Qwen3TTSTokenizer.from_pretrained(path, device_map="cpu")


if __name__ == "__main__" and "--check" in sys.argv:
    print("qwen-tts oracle ok")
