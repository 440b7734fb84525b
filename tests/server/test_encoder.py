import io

import numpy as np
import opuslib
import pytest
import soundfile
import soxr

from voicewire.server import encoder as encoder_module
from voicewire.server.encoder import (
    AudioEncoder,
    OpusFrames,
    OutputFormat,
    alaw_decode,
    alaw_encode,
    mulaw_decode,
    mulaw_encode,
)
from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import FormatSpec


def _tone(seconds: float, rate: int = 24000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)


def _chirp(seconds: float, rate: int = 24000) -> np.ndarray:
    """200 Hz rising to 2.6 kHz: unlike a tone, it matches itself only when aligned."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * (200 + 1200 * t / seconds) * t)).astype(np.float32)


def _feed(encoder: AudioEncoder, x: np.ndarray, sizes: list[int]) -> list:
    """`x` in chunks of `sizes`, repeated, the last one final."""
    packets, start, i = [], 0, 0
    while start < x.shape[0]:
        end = start + sizes[i % len(sizes)]
        packets += encoder.encode(x[start:end], final=end >= x.shape[0])
        start, i = end, i + 1
    return packets


@pytest.mark.parametrize("rate", [24000, 48000])
def test_opus_packets_are_20_ms_with_true_counts_and_a_flagged_last(rate: int) -> None:
    encoder = AudioEncoder(OutputFormat("opus", rate))
    x = _chirp(1.013)  # not a whole number of packets
    packets = _feed(encoder, x, UNEVEN)
    total = round(x.shape[0] * rate / 24000)
    assert sum(p.samples for p in packets) == total == encoder.sent_samples
    assert [p.pts for p in packets] == np.cumsum([0] + [p.samples for p in packets])[:-1].tolist()
    assert {p.samples for p in packets[:-2]} == {rate // 50}
    assert packets[-1].final and not any(p.final for p in packets[:-1])
    decoder = opuslib.Decoder(rate, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(p.data, rate // 50), "<i2") for p in packets])
    assert decoded.shape[0] >= encoder.codec_delay + total  # the lookahead was flushed out too
    heard = decoded[encoder.codec_delay : encoder.codec_delay + total].astype(np.float32) / 32768
    reference = soxr.resample(x, 24000, rate)
    assert np.corrcoef(heard, reference)[0, 1] > 0.99  # the end of the audio is in there too
    assert np.corrcoef(decoded[:total], reference)[0, 1] < 0.5  # the pre-skip is what aligns them


def test_opus_split_at_its_first_packet_makes_the_same_packets() -> None:
    """What `packet_samples_in` says completes the next packet, encoded apart, then the rest: the
    packets of the whole chunk encoded at once (the session sends a context's first one ahead)."""
    chunk = _chirp(0.08)  # an engine chunk of one frame: four packets
    whole = AudioEncoder(OutputFormat("opus", 48000))
    split = AudioEncoder(OutputFormat("opus", 48000))
    assert split.packet_samples_in == 480
    first = split.encode(chunk[:480])
    assert len(first) == 1 and (first[0].pts, first[0].samples) == (0, 960)
    assert split.packet_samples_in == 480
    assert first + split.encode(chunk[480:]) == whole.encode(chunk)
    split.encode(chunk[:100])  # held: short of a packet
    assert split.packet_samples_in == 380
    assert AudioEncoder(OutputFormat("pcm_s16le", 24000)).packet_samples_in == 0


@pytest.mark.parametrize(("complexity", "bitrate"), [(0, 32000), (5, 32000), (5, 510000), (6, 128000)])
def test_opus_blocks_make_the_packets_of_one_call_a_packet(
    complexity: int, bitrate: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five packets to a libopus call (OPUS_BLOCK) where a chunk holds them: at the protocol's
    default complexity (5) and up to 6, at any bitrate, the same bytes as one call a packet."""
    x = _chirp(2.0)
    sizes = [1920, 7680, 3840, 15360, 700]  # blocks with singles left over, and a packet split across chunks
    fmt = OutputFormat("opus", 48000, bitrate=bitrate, complexity=complexity)
    blocked = _feed(AudioEncoder(fmt), x, sizes)
    monkeypatch.setattr(encoder_module, "OPUS_BLOCK", 1)
    single = _feed(AudioEncoder(fmt), x, sizes)
    assert len(blocked) == len(single) == 101
    assert blocked == single


@pytest.mark.parametrize(("complexity", "bitrate"), [(5, 32000), (7, 128000), (10, 32000)])
def test_opus_blocks_split_into_20_ms_packets_of_one_frame(complexity: int, bitrate: int) -> None:
    """From complexity 7 libopus may choose a block's mode once for its five frames, so the bytes
    may differ from one call a packet's; each packet is still one 20 ms frame (TOC code 0), decoded
    alone."""
    encoder = AudioEncoder(OutputFormat("opus", 24000, bitrate=bitrate, complexity=complexity))
    packets = _feed(encoder, _chirp(1.0), [7680])
    assert len(packets) == 51
    decoder = opuslib.Decoder(24000, 1)
    for packet in packets:
        assert packet.data[0] & 0x03 == 0
        assert len(decoder.decode(packet.data, 2880)) == 480 * 2  # 20 ms of int16, from a 120 ms buffer


def test_opus_frames_split_a_packet_of_five_frames_and_refuse_garbage() -> None:
    opus = opuslib.Encoder(24000, 1, opuslib.APPLICATION_AUDIO)
    pcm = (_tone(0.1) * 32767).astype("<i2").tobytes()
    packet = opus.encode(pcm, 2400)
    assert packet[0] & 0x03 == 3  # code 3: a frame count follows the TOC
    frames = OpusFrames().split(packet)
    assert len(frames) == 5 and all(f[0] == packet[0] & 0xFC for f in frames)
    # Decoded one by one, the five packets are the whole packet's 100 ms, sample for sample.
    whole = opuslib.Decoder(24000, 1).decode(packet, 2400)
    apart = opuslib.Decoder(24000, 1)
    assert b"".join(apart.decode(f, 480) for f in frames) == whole and len(whole) == 2400 * 2
    with pytest.raises(opuslib.OpusError, match="corrupted stream"):
        OpusFrames().split(bytes([0x03, 0x3F]))  # code 3 with 63 frames and no bytes for them


def test_opus_at_48k_is_the_24k_stream_decoded_at_48k() -> None:
    """48 kHz Opus is encoded from the engine's 24 kHz samples, not from a resample: the same
    packets as 24 kHz Opus, with its counts, pts and pre-skip in 48 kHz samples."""
    x = _chirp(0.5)
    at24, at48 = AudioEncoder(OutputFormat("opus", 24000)), AudioEncoder(OutputFormat("opus", 48000))
    packets24, packets48 = _feed(at24, x, UNEVEN), _feed(at48, x, UNEVEN)
    assert [p.data for p in packets48] == [p.data for p in packets24]
    assert [(p.pts, p.samples) for p in packets48] == [(2 * p.pts, 2 * p.samples) for p in packets24]
    assert at48.codec_delay == 2 * at24.codec_delay == 312  # 6.5 ms, Opus's lookahead


def test_an_empty_final_chunk_still_flushes_the_encoder() -> None:
    encoder = AudioEncoder(OutputFormat("opus", 24000))
    x = _tone(0.08)  # one frame: whole packets, nothing pending
    packets = encoder.encode(x) + encoder.encode(np.zeros(0, np.float32), final=True)
    assert sum(p.samples for p in packets) == 1920 and packets[-1].final and packets[-1].samples == 0
    decoder = opuslib.Decoder(24000, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(p.data, 480), "<i2") for p in packets])
    assert decoded.shape[0] >= encoder.codec_delay + 1920  # the lookahead came out too


def test_mulaw_round_trip_and_known_values() -> None:
    x = np.linspace(-1, 1, 1001, dtype=np.float32)
    assert np.abs(mulaw_decode(mulaw_encode(x)) - x).max() < 0.032
    assert mulaw_encode(np.zeros(1, np.float32)) == b"\xff"  # G.711: silence is 0xff
    assert mulaw_encode(np.ones(1, np.float32)) == b"\x80"


def test_rates_are_checked_per_encoding() -> None:
    assert OutputFormat.from_spec(FormatSpec(encoding="pcm_s16le", sample_rate=44100)).packet_samples == 0
    with pytest.raises(ProtocolError, match="opus takes sample_rate 24000, 48000; got 16000"):
        OutputFormat.from_spec(FormatSpec(encoding="opus", sample_rate=16000))


UNEVEN = [1000, 1920, 777, 3840, 5, 2500]  # engine chunks are 80 ms frames; these are not


@pytest.mark.parametrize(
    ("rate", "bitrate"), [(22050, 32000), (24000, 48000), (44100, 128000), (48000, 192000)]
)
def test_mp3_stream_decodes_to_the_input_after_the_codec_delay(rate: int, bitrate: int) -> None:
    encoder = AudioEncoder(
        OutputFormat.from_spec(FormatSpec(encoding="mp3", sample_rate=rate, bitrate=bitrate))
    )
    x = _chirp(1.3)
    packets = _feed(encoder, x, UNEVEN)
    total = round(x.shape[0] * rate / 24000)
    assert sum(p.samples for p in packets) == total == encoder.sent_samples
    assert [p.pts for p in packets] == np.cumsum([0] + [p.samples for p in packets])[:-1].tolist()
    assert packets[-1].final and not any(p.final for p in packets[:-1])
    assert all(p.data for p in packets)
    decoded, decoded_rate = soundfile.read(io.BytesIO(b"".join(p.data for p in packets)), dtype="float32")
    assert decoded_rate == rate and encoder.codec_delay == 1105
    padding = decoded.shape[0] - encoder.codec_delay - total
    assert 0 <= padding < 1152  # the flushed tail is all there, padded to a whole frame
    heard = decoded[encoder.codec_delay : encoder.codec_delay + total]
    reference = soxr.resample(x, 24000, rate)
    assert np.corrcoef(heard, reference)[0, 1] > 0.99
    assert np.corrcoef(decoded[:total], reference)[0, 1] < 0.5  # the delay is what aligns them


def test_mp3_samples_of_a_chunk_without_bytes_ride_with_the_next_packet() -> None:
    encoder = AudioEncoder(OutputFormat("mp3", 24000, 48000))  # no resampler: counts are the input's
    x = _chirp(0.5)
    assert encoder.encode(x[:100]) == [] and encoder.sent_samples == 0  # under one frame: no bytes
    (packet,) = encoder.encode(x[100:4000])
    assert (packet.pts, packet.samples) == (0, 4000) and encoder.sent_samples == 4000


def test_mp3_flushes_on_an_empty_final_chunk_and_says_nothing_for_nothing() -> None:
    encoder = AudioEncoder(OutputFormat("mp3", 24000, 48000))
    packets = encoder.encode(_chirp(0.16))
    packets += encoder.encode(np.zeros(0, np.float32), final=True)
    assert sum(p.samples for p in packets) == 3840 and packets[-1].final
    decoded, _ = soundfile.read(io.BytesIO(b"".join(p.data for p in packets)), dtype="float32")
    assert decoded.shape[0] >= encoder.codec_delay + 3840
    silent = AudioEncoder(OutputFormat("mp3", 24000, 48000))
    assert silent.encode(np.zeros(0, np.float32), final=True) == []


@pytest.mark.parametrize(
    ("rate", "bitrate", "message"),
    [
        (22050, 192000, "mp3 at 22050 takes bitrate 8000, 16000, .*, 144000, 160000; got 192000"),
        (44100, 100000, "mp3 at 44100 takes bitrate 32000, 40000, .*, 256000, 320000; got 100000"),
        (44100, 16000, "mp3 at 44100 takes bitrate 32000, .*; got 16000"),
        (16000, 32000, "mp3 takes sample_rate 22050, 24000, 44100, 48000; got 16000"),
    ],
)
def test_mp3_rates_and_bitrates_are_checked(rate: int, bitrate: int, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as raised:
        OutputFormat.from_spec(FormatSpec(encoding="mp3", sample_rate=rate, bitrate=bitrate))
    assert raised.value.code == "invalid_format"


@pytest.mark.parametrize(
    "name",
    "mp3_22050_32 mp3_24000_48 mp3_44100_32 mp3_44100_64 mp3_44100_96 mp3_44100_128 mp3_44100_192".split(),
)
def test_elevenlabs_mp3_formats_are_taken(name: str) -> None:
    _, rate, kbps = name.split("_")
    fmt = OutputFormat.from_spec(FormatSpec(encoding="mp3", sample_rate=int(rate), bitrate=int(kbps) * 1000))
    assert AudioEncoder(fmt).encode(_chirp(0.2), final=True)[0].final


@pytest.mark.parametrize("rate", [22050, 32000])
@pytest.mark.parametrize(("encoding", "dtype"), [("pcm_s16le", "<i2"), ("pcm_f32le", "<f4")])
def test_pcm_at_22050_and_32000_is_resampled(rate: int, encoding: str, dtype: str) -> None:
    encoder = AudioEncoder(OutputFormat.from_spec(FormatSpec(encoding=encoding, sample_rate=rate)))
    x = _chirp(1.3)
    packets = _feed(encoder, x, UNEVEN)
    total = round(x.shape[0] * rate / 24000)
    assert sum(p.samples for p in packets) == total == encoder.sent_samples and packets[-1].final
    heard = np.frombuffer(b"".join(p.data for p in packets), dtype).astype(np.float32)
    heard /= 32767 if encoding == "pcm_s16le" else 1
    assert heard.shape == (total,)
    assert np.corrcoef(heard, soxr.resample(x, 24000, rate))[0, 1] > 0.999


def test_alaw_round_trip_known_values_and_rate() -> None:
    x = np.linspace(-1, 1, 1001, dtype=np.float32)
    assert np.abs(alaw_decode(alaw_encode(x)) - x).max() < 0.032
    assert alaw_encode(np.zeros(1, np.float32)) == b"\xd5"  # G.711: silence is 0xd5
    assert alaw_encode(np.array([1.0, -1.0, 2.0], np.float32)) == b"\xaa\x2a\xaa"  # beyond clips
    encoder = AudioEncoder(OutputFormat.from_spec(FormatSpec(encoding="alaw", sample_rate=8000)))
    packets = _feed(encoder, _chirp(0.5), [1920])
    assert sum(len(p.data) for p in packets) == encoder.sent_samples == 4000
    with pytest.raises(ProtocolError, match="alaw takes sample_rate 8000; got 16000"):
        OutputFormat.from_spec(FormatSpec(encoding="alaw", sample_rate=16000))
