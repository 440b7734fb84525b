"""Audio encoders: the engine's 24 kHz float PCM -> what the client asked for, per context.

Opus: 20 ms packets (opuslib), mono, 24 or 48 kHz. PCM s16le/f32le at 8, 16, 24, 44.1 or 48 kHz.
mu-law (G.711) at 8 kHz. Other rates are resampled with soxr's streaming resampler, so chunk edges
leave no trace. Every packet carries its pts and sample count in output samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import opuslib
import soxr

from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import FormatSpec

ENGINE_RATE = 24000
RATES = {
    "opus": (24000, 48000),
    "pcm_s16le": (8000, 16000, 24000, 44100, 48000),
    "pcm_f32le": (8000, 16000, 24000, 44100, 48000),
    "mulaw": (8000,),
}
OPUS_PACKET_MS = 20


@dataclass(frozen=True)
class OutputFormat:
    encoding: str
    sample_rate: int
    bitrate: int = 32000
    complexity: int = 5

    @classmethod
    def from_spec(cls, spec: FormatSpec) -> OutputFormat:
        allowed = RATES[spec.encoding]
        if spec.sample_rate not in allowed:
            raise ProtocolError(
                "invalid_format",
                f"{spec.encoding} takes sample_rate {', '.join(map(str, allowed))}; got {spec.sample_rate}",
            )
        return cls(spec.encoding, spec.sample_rate, spec.bitrate, spec.complexity)

    @property
    def packet_samples(self) -> int:
        """Samples per Opus packet; 0 for PCM and mu-law, whose chunks follow the engine's."""
        return self.sample_rate * OPUS_PACKET_MS // 1000 if self.encoding == "opus" else 0


@dataclass(frozen=True)
class Packet:
    data: bytes
    pts: int  # first sample, in output samples from the context start
    samples: int  # valid samples (a padded final Opus packet decodes to more)
    final: bool = False


def mulaw_encode(pcm: np.ndarray) -> bytes:
    """G.711 mu-law of float samples in [-1, 1]."""
    x = np.clip(pcm, -1.0, 1.0) * 32767.0
    sign = np.where(x < 0, 0x80, 0x00)
    magnitude = np.minimum(np.abs(x).astype(np.int32) + 0x84, 0x7FFF)  # bias 132, clip
    exponent = np.floor(np.log2(magnitude)).astype(np.int32) - 7
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def mulaw_decode(data: bytes) -> np.ndarray:
    """Inverse of `mulaw_encode` (for tests and clients), as float32 in [-1, 1]."""
    u = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF
    sign, exponent, mantissa = u & 0x80, (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return (np.where(sign, -magnitude, magnitude) / 32768.0).astype(np.float32)


class AudioEncoder:
    """One context's encoder: feed it engine chunks in order, get packets."""

    def __init__(self, fmt: OutputFormat) -> None:
        self.format = fmt
        self._resampler = (
            soxr.ResampleStream(ENGINE_RATE, fmt.sample_rate, 1, dtype="float32", quality="HQ")
            if fmt.sample_rate != ENGINE_RATE
            else None
        )
        self._pts = 0  # output samples emitted
        self._pending = np.zeros(0, np.float32)  # Opus: samples short of a full packet
        self._opus: opuslib.Encoder | None = None
        if fmt.encoding == "opus":
            self._opus = opuslib.Encoder(fmt.sample_rate, 1, opuslib.APPLICATION_AUDIO)
            self._opus.bitrate = fmt.bitrate
            self._opus.complexity = fmt.complexity

    @property
    def sent_samples(self) -> int:
        """Output samples encoded so far (the next packet's pts)."""
        return self._pts

    @property
    def codec_delay(self) -> int:
        """Samples an Opus decoder outputs before the first real sample (its pre-skip)."""
        return int(self._opus.lookahead) if self._opus is not None else 0

    def encode(self, pcm: np.ndarray, final: bool = False) -> list[Packet]:
        """24 kHz float32 samples -> packets. `final` flushes the resampler and the last packet."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm, last=final)
        if self._opus is None:
            return self._raw(pcm, final)
        return self._packets(pcm, final)

    def _raw(self, pcm: np.ndarray, final: bool) -> list[Packet]:
        if pcm.shape[0] == 0:
            return []
        encoding = self.format.encoding
        if encoding == "pcm_f32le":
            data = pcm.astype("<f4").tobytes()
        elif encoding == "pcm_s16le":
            data = (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()
        else:
            data = mulaw_encode(pcm)
        packet = Packet(data, self._pts, pcm.shape[0], final)
        self._pts += pcm.shape[0]
        return [packet]

    def _packets(self, pcm: np.ndarray, final: bool) -> list[Packet]:
        assert self._opus is not None
        size = self.format.packet_samples
        samples = np.concatenate((self._pending, pcm))
        valid = samples.shape[0]
        if final and (valid or self._pts):  # flush even when the last chunk is empty
            # Push the encoder's lookahead out too, then pad to whole packets; `samples` stays true.
            tail = self.codec_delay + (-(valid + self.codec_delay)) % size
            samples = np.concatenate((samples, np.zeros(tail, np.float32)))
        whole = samples.shape[0] // size * size
        self._pending = samples[whole:]
        pcm16 = (np.clip(samples[:whole], -1.0, 1.0) * 32767.0).round().astype("<i2")
        packets = []
        for start in range(0, whole, size):
            # The last packets of a context may hold only padding and the lookahead flush.
            count = min(size, max(valid - start, 0))
            data = self._opus.encode(pcm16[start : start + size].tobytes(), size)
            packets.append(Packet(data, self._pts, count, final=final and start + size == whole))
            self._pts += count
        return packets
