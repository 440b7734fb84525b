"""The model: Qwen3-TTS's parts as PyTorch modules (talker and code predictor, codec decoder and
encoder, speaker encoder), the text tokenizer and prompt layout, sampling, and the loaders that read
a checkpoint folder as Qwen publishes it. Nothing here knows about streams or batching; that is
engine/runtime/."""
