"""Random codec decoders for the kernel tests: built from a decoder config, with weights loud
enough to depend on the codes (`codec_decoder.random_init_`), prepared for decoding."""

import torch

from voicewire.engine.model import codec_decoder
from voicewire.engine.model import random_checkpoint as checkpoints


def random_decoder(
    size: str, device: str, dtype: torch.dtype = torch.float32, **changes: int
) -> codec_decoder.CodecDecoder:
    """The decoder of a `size` random checkpoint ("tiny", "0.6b"), its config changed by `changes`."""
    config = codec_decoder.CodecDecoderConfig.from_dict(checkpoints.codec_decoder_config(size) | changes)
    decoder = codec_decoder.CodecDecoder(config)
    codec_decoder.random_init_(decoder, torch.Generator().manual_seed(0))
    decoder = decoder.to(device, dtype).eval()
    decoder.prepare()
    return decoder
