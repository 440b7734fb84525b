import numpy as np
import opuslib
import pytest

from voicewire.server.encoder import AudioEncoder, OutputFormat, mulaw_decode, mulaw_encode
from voicewire.server.errors import ProtocolError
from voicewire.server.protocol import FormatSpec


def _tone(seconds: float, rate: int = 24000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)


@pytest.mark.parametrize("rate", [24000, 48000])
def test_opus_packets_are_20_ms_with_true_counts_and_a_flagged_last(rate: int) -> None:
    encoder = AudioEncoder(OutputFormat("opus", rate))
    x = _tone(1.013)  # not a whole number of packets
    packets = []
    for start in range(0, x.shape[0], 1920):
        packets += encoder.encode(x[start : start + 1920], final=start + 1920 >= x.shape[0])
    total = round(x.shape[0] * rate / 24000)
    assert sum(p.samples for p in packets) == total == encoder.sent_samples
    assert [p.pts for p in packets] == np.cumsum([0] + [p.samples for p in packets])[:-1].tolist()
    assert packets[-1].final and not any(p.final for p in packets[:-1])
    decoder = opuslib.Decoder(rate, 1)
    decoded = np.concatenate([np.frombuffer(decoder.decode(p.data, rate // 50), "<i2") for p in packets])
    heard = decoded[encoder.codec_delay : encoder.codec_delay + total].astype(np.float32) / 32768
    reference = _tone(1.013, rate)[:total]
    assert np.corrcoef(heard, reference)[0, 1] > 0.99  # the end of the audio is in there too


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
