"""Audio encoders: the engine's 24 kHz float PCM -> what the client asked for, per context.

Opus: 20 ms packets (opuslib), mono, decoded at 24 or 48 kHz and always encoded from the engine's
24 kHz: an Opus stream decodes at any rate, and the engine's audio has nothing above 12 kHz for a
48 kHz encoder to code, so resampling first would only cost CPU (about a fifth of a worker's codec
time at 48 kHz). MP3: CBR mono (LAME via lameenc) at 22.05, 24,
44.1 or 48 kHz, one byte stream cut wherever LAME has output. PCM s16le/f32le at 8, 16, 22.05, 24,
32, 44.1 or 48 kHz. mu-law and A-law (G.711) at 8 kHz. Other rates are resampled with soxr's
streaming resampler, so chunk edges leave no trace. Every packet carries its pts and sample count in
output samples.
"""

from __future__ import annotations

import ctypes
import io
from dataclasses import dataclass

import lameenc
import numpy as np
import opuslib
import soundfile
import soxr

from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import FormatSpec

ENGINE_RATE = 24000
# The CBR bitrates (bits per second) each MP3 rate has: MPEG-1 Layer III at 32 kHz and up, MPEG-2
# below. LAME would quietly round any other bitrate to one of these, so we refuse it instead.
_MPEG1 = tuple(kbps * 1000 for kbps in (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320))
_MPEG2 = tuple(kbps * 1000 for kbps in (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160))
MP3_BITRATES = {22050: _MPEG2, 24000: _MPEG2, 44100: _MPEG1, 48000: _MPEG1}
RATES = {
    "opus": (24000, 48000),
    "mp3": tuple(MP3_BITRATES),
    "pcm_s16le": (8000, 16000, 22050, 24000, 32000, 44100, 48000),
    "pcm_f32le": (8000, 16000, 22050, 24000, 32000, 44100, 48000),
    "mulaw": (8000,),
    "alaw": (8000,),
}
OPUS_PACKET_MS = 20
ENGINE_PACKET = ENGINE_RATE * OPUS_PACKET_MS // 1000  # an Opus packet in the encoder's (24 kHz) samples
# Packets one libopus call encodes where a chunk holds that many. libopus codes a 100 ms frame as
# five 20 ms frames in every mode (CELT, SILK, hybrid), each encoded whole and carried in one code-3
# packet; split out, each is a 20 ms packet of its own. At complexity 0-6 they are the very bytes of
# one call a packet, at any bitrate; from 7, where libopus weighs SILK and hybrid, it chooses a
# block's mode once for its five, and some bytes differ (at 7 above 32 kbit/s, from 8 at any). The
# cost is per call as much as per packet: every call releases the GIL and takes it back, and where a
# worker's event loop is busy, taking it back waits for the switch interval. On an H200 the workers'
# codec threads spent 10-15% less CPU an audio second, and chunks reached the sockets 3-4x sooner
# (docs/log/2026-11.md, session 65).
OPUS_BLOCK = 5
# libopus's packet parser, called holding the GIL (PyDLL): it reads a few header bytes, and releasing
# the GIL for that would cost more than the call.
_opus_packet_parse = ctypes.PyDLL(opuslib.api.libopus._name).opus_packet_parse
_opus_packet_parse.restype = ctypes.c_int
_opus_packet_parse.argtypes = (
    ctypes.c_char_p,  # data
    ctypes.c_int32,  # len
    ctypes.POINTER(ctypes.c_ubyte),  # out_toc
    ctypes.POINTER(ctypes.c_void_p),  # frames[48]
    ctypes.POINTER(ctypes.c_int16),  # size[48]
    ctypes.POINTER(ctypes.c_int),  # payload_offset
)
# What an MP3 decoder outputs before the first real sample: LAME's encoder delay (576) plus the
# decoder's own synthesis delay (529). No LAME/Xing tag is written (lameenc leaves it off, so packets
# concatenate into a plain stream), so no decoder knows to drop them; 1105 measured with libsndfile's
# mpg123 at every rate in MP3_BITRATES (tests/server/test_encoder.py checks it).
MP3_DELAY = 576 + 529
# LAME's -q 3 (its default): 110x real time at 44.1 kHz/128 kbps on one core, -q 2 half that.
MP3_QUALITY = 3


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
        if spec.encoding == "mp3" and spec.bitrate not in MP3_BITRATES[spec.sample_rate]:
            bitrates = ", ".join(map(str, MP3_BITRATES[spec.sample_rate]))
            raise ProtocolError(
                "invalid_format", f"mp3 at {spec.sample_rate} takes bitrate {bitrates}; got {spec.bitrate}"
            )
        return cls(spec.encoding, spec.sample_rate, spec.bitrate, spec.complexity)

    @property
    def packet_samples(self) -> int:
        """Samples per Opus packet; 0 for the others, whose packets follow the engine's chunks."""
        return self.sample_rate * OPUS_PACKET_MS // 1000 if self.encoding == "opus" else 0


@dataclass(frozen=True)
class Packet:
    data: bytes
    pts: int  # first sample, in output samples from the context start
    samples: int  # valid samples (a padded final Opus packet decodes to more; see MP3_DELAY for MP3)
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


def alaw_encode(pcm: np.ndarray) -> bytes:
    """G.711 A-law of float samples in [-1, 1] (libsndfile's; it indexes a table, hence the clip)."""
    out = io.BytesIO()
    soundfile.write(out, np.clip(pcm, -1.0, 1.0), 8000, format="RAW", subtype="ALAW")
    return out.getvalue()


def alaw_decode(data: bytes) -> np.ndarray:
    """Inverse of `alaw_encode` (for tests and clients), as float32 in [-1, 1]."""
    raw = io.BytesIO(data)
    pcm, _ = soundfile.read(raw, format="RAW", subtype="ALAW", samplerate=8000, channels=1, dtype="float32")
    return pcm


def to_s16(pcm: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as little-endian int16, clipped and rounded (PCM, Opus, MP3 in)."""
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2")


class OpusFrames:
    """Splits an Opus packet of several frames into one packet a frame (RFC 6716 section 3.2),
    through libopus's own parser. Not thread-safe: one per encoder."""

    def __init__(self) -> None:
        self._toc = ctypes.c_ubyte()
        self._frames = (ctypes.c_void_p * 48)()
        self._sizes = (ctypes.c_int16 * 48)()
        self._offset = ctypes.c_int()

    def split(self, packet: bytes) -> list[bytes]:
        count = _opus_packet_parse(
            packet,
            len(packet),
            ctypes.byref(self._toc),
            self._frames,
            self._sizes,
            ctypes.byref(self._offset),
        )
        if count < 0:
            raise opuslib.OpusError(count)  # libopus's error code; its str() is libopus's message
        # A packet's frames lie in order after its header, padding after the last; a packet of one
        # frame is the TOC byte with its frame count code 0, then the frame.
        toc = bytes((self._toc.value & 0xFC,))
        at = self._offset.value
        frames = []
        for size in self._sizes[:count]:
            frames.append(toc + packet[at : at + size])
            at += size
        return frames


class AudioEncoder:
    """One context's encoder: feed it engine chunks in order, get packets."""

    def __init__(self, fmt: OutputFormat) -> None:
        self.format = fmt
        self._resampler = (
            soxr.ResampleStream(ENGINE_RATE, fmt.sample_rate, 1, dtype="float32", quality="HQ")
            if fmt.sample_rate != ENGINE_RATE and fmt.encoding != "opus"
            else None
        )
        # Opus: output samples per encoded one (the pts, counts and pre-skip are in output samples).
        self._scale = fmt.sample_rate // ENGINE_RATE
        self._pts = 0  # output samples emitted
        self._pending = np.zeros(0, np.float32)  # Opus: samples short of a full packet
        self._opus: opuslib.Encoder | None = None
        self._frames: OpusFrames | None = None  # Opus: splits a block's packet
        if fmt.encoding == "opus":
            self._frames = OpusFrames()
            self._opus = opuslib.Encoder(ENGINE_RATE, 1, opuslib.APPLICATION_AUDIO)
            self._opus.bitrate = fmt.bitrate
            self._opus.complexity = fmt.complexity
        self._held = 0  # MP3: samples fed to LAME since its last output
        self._lame: lameenc.Encoder | None = None
        if fmt.encoding == "mp3":
            self._lame = lameenc.Encoder()
            self._lame.set_channels(1)
            self._lame.set_in_sample_rate(fmt.sample_rate)
            self._lame.set_out_sample_rate(fmt.sample_rate)  # else LAME may lower it for low bitrates
            self._lame.set_bit_rate(fmt.bitrate // 1000)
            self._lame.set_quality(MP3_QUALITY)
            self._lame.silence()

    @property
    def sent_samples(self) -> int:
        """Output samples encoded so far (the next packet's pts)."""
        return self._pts

    @property
    def packet_samples_in(self) -> int:
        """Engine samples that complete the next Opus packet; 0 for the other formats, whose
        packets follow the chunks they are given."""
        if self._opus is None:
            return 0
        return ENGINE_PACKET - self._pending.shape[0]

    @property
    def codec_delay(self) -> int:
        """Samples a decoder outputs before the first real sample: Opus's pre-skip, MP3_DELAY for
        MP3, 0 for the others."""
        if self._opus is not None:
            return int(self._opus.lookahead) * self._scale
        return MP3_DELAY if self._lame is not None else 0

    def encode(self, pcm: np.ndarray, final: bool = False) -> list[Packet]:
        """24 kHz float32 samples -> packets. `final` flushes the resampler and the last packet."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm, last=final)
        if self._opus is not None:
            return self._packets(pcm, final)
        if self._lame is not None:
            return self._mp3(pcm, final)
        return self._raw(pcm, final)

    def _raw(self, pcm: np.ndarray, final: bool) -> list[Packet]:
        if pcm.shape[0] == 0:
            return []
        encoding = self.format.encoding
        if encoding == "pcm_f32le":
            data = pcm.astype("<f4").tobytes()
        elif encoding == "pcm_s16le":
            data = to_s16(pcm).tobytes()
        elif encoding == "alaw":
            data = alaw_encode(pcm)
        else:
            data = mulaw_encode(pcm)
        packet = Packet(data, self._pts, pcm.shape[0], final)
        self._pts += pcm.shape[0]
        return [packet]

    def _packets(self, pcm: np.ndarray, final: bool) -> list[Packet]:
        assert self._opus is not None and self._frames is not None
        size = ENGINE_PACKET
        lookahead = int(self._opus.lookahead)
        samples = np.concatenate((self._pending, pcm))
        valid = samples.shape[0]
        if final and (valid or self._pts):  # flush even when the last chunk is empty
            # Push the encoder's lookahead out too, then pad to whole packets; `samples` stays true.
            tail = lookahead + (-(valid + lookahead)) % size
            samples = np.concatenate((samples, np.zeros(tail, np.float32)))
        whole = samples.shape[0] // size * size
        self._pending = samples[whole:]
        pcm16 = to_s16(samples[:whole])
        encoded: list[bytes] = []
        start = 0
        while start < whole:
            span = OPUS_BLOCK * size if whole - start >= OPUS_BLOCK * size else size
            data = self._opus.encode(pcm16[start : start + span].tobytes(), span)
            encoded += self._frames.split(data) if span > size else [data]
            start += span
        packets = []
        for i, data in enumerate(encoded):
            # The last packets of a context may hold only padding and the lookahead flush.
            count = min(size, max(valid - i * size, 0)) * self._scale
            packets.append(Packet(data, self._pts, count, final=final and i == len(encoded) - 1))
            self._pts += count
        return packets

    def _mp3(self, pcm: np.ndarray, final: bool) -> list[Packet]:
        # LAME holds back over a frame's samples before its first output, and its bytes need not
        # end on a frame, so a chunk may bring none: its samples then go with the next packet.
        assert self._lame is not None
        data = bytes(self._lame.encode(to_s16(pcm).tobytes())) if pcm.shape[0] else b""
        self._held += pcm.shape[0]
        if final and (self._held or self._pts):  # flush even when the last chunk is empty
            data += bytes(self._lame.flush())  # the rest, and padding to a whole frame
        if not data:
            return []
        packet = Packet(data, self._pts, self._held, final)
        self._pts += self._held
        self._held = 0
        return [packet]
