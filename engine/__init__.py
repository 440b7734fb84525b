"""voicewire.engine: Qwen3-TTS in PyTorch (model, checkpoint loading, generation)."""
