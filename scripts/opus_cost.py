"""What one 20 ms Opus packet costs a server worker's codec thread, by encoder complexity and
application, and what each setting does to the audio (host only).

The server encodes every context's audio as the engine's 24 kHz, mono, in 20 ms packets at the
bitrate and complexity the client asks for (`server.encoder.AudioEncoder`, opuslib's
APPLICATION_AUDIO); at about 1,200 audio-s/s on a 16-CPU host, its workers' codec threads are full
(docs/log/2026-11.md, session 60). This encodes `--seconds` of a WAV (any rate, resampled to 24 kHz
with soxr; default: a synthetic vowel-like signal) through `AudioEncoder` for each setting, timing
the thread's CPU (`time.thread_time`) per packet, the best of `--rounds` (the applications the
server does not use, VOIP and RESTRICTED_LOWDELAY, through opuslib alone), then decodes the packets
(opuslib, 24 kHz) and scores them against the input: the segmental SNR, and ITU-T P.862 wideband
PESQ at 16 kHz where the `pesq` package is installed (a listening proxy for speech inputs).

Usage: python scripts/opus_cost.py [WAV] [--seconds S] [--complexity 0,3,5,10] [--bitrate 32000]
       [--rounds R] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import opuslib
import soundfile
import soxr

from voicewire.server.encoder import ENGINE_PACKET, ENGINE_RATE, AudioEncoder, OutputFormat, to_s16


def _synthetic(seconds: float) -> np.ndarray:
    """A voiced, vowel-like signal: a 90-180 Hz glottal pulse train through three formant
    resonances that glide, at speech-like loudness, with pauses."""
    n = int(seconds * ENGINE_RATE)
    t = np.arange(n) / ENGINE_RATE
    pitch = 130 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = np.cumsum(pitch / ENGINE_RATE)
    source = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
    out = np.zeros(n)
    for centre, width in ((700, 110), (1200, 120), (2600, 160)):
        glide = centre * (1 + 0.2 * np.sin(2 * np.pi * 0.3 * t + centre))
        r = np.exp(-np.pi * width / ENGINE_RATE)
        y1 = y2 = 0.0
        y = np.empty(n)
        for i in range(n):  # a two-pole resonator whose centre glides
            c = 2 * r * np.cos(2 * np.pi * glide[i] / ENGINE_RATE)
            y0 = source[i] + c * y1 - r * r * y2
            y[i], y2, y1 = y0, y1, y0
        out += y
    envelope = (np.sin(2 * np.pi * 0.8 * t) > -0.6).astype(np.float64)  # pauses
    out *= envelope / (np.abs(out).max() + 1e-9) * 0.5
    return out.astype(np.float32)


def _load(path: Path | None, seconds: float) -> np.ndarray:
    if path is None:
        return _synthetic(seconds)
    audio, rate = soundfile.read(path, dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if rate != ENGINE_RATE:
        audio = soxr.resample(audio, rate, ENGINE_RATE, quality="HQ")
    reps = int(np.ceil(seconds * ENGINE_RATE / audio.shape[0]))
    return np.tile(audio, reps)[: int(seconds * ENGINE_RATE)].astype(np.float32)


def _encode(audio: np.ndarray, fmt: OutputFormat, application: int) -> tuple[list[bytes], float]:
    """`audio` as 20 ms packets and the thread's CPU per packet: through the server's own encoder
    (`AudioEncoder`, fed the engine's 4-frame chunks) for APPLICATION_AUDIO, the server's; through
    opuslib directly, framed alike, for the others (for comparison: the server has no setting for them)."""
    chunk = ENGINE_PACKET * 4
    started = time.thread_time()
    if application == opuslib.APPLICATION_AUDIO:
        encoder = AudioEncoder(fmt)
        packets = []
        for start in range(0, audio.shape[0], chunk):
            final = start + chunk >= audio.shape[0]
            packets += [packet.data for packet in encoder.encode(audio[start : start + chunk], final=final)]
    else:
        opus = opuslib.Encoder(ENGINE_RATE, 1, application)
        opus.bitrate, opus.complexity = fmt.bitrate, fmt.complexity
        whole = audio.shape[0] // ENGINE_PACKET * ENGINE_PACKET
        pcm16 = to_s16(audio[:whole])
        packets = [
            opus.encode(pcm16[start : start + ENGINE_PACKET].tobytes(), ENGINE_PACKET)
            for start in range(0, whole, ENGINE_PACKET)
        ]
    return packets, (time.thread_time() - started) / len(packets)


def _decode(packets: list[bytes], delay: int, samples: int) -> np.ndarray:
    decoder = opuslib.Decoder(ENGINE_RATE, 1)
    pcm = b"".join(decoder.decode(data, ENGINE_PACKET) for data in packets)
    out = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return out[delay : delay + samples]


def _segmental_snr(ref: np.ndarray, out: np.ndarray) -> float:
    """Mean SNR (dB) over the 20 ms segments with signal, each clamped to [-10, 35] dB as is usual."""
    n = min(ref.shape[0], out.shape[0]) // ENGINE_PACKET * ENGINE_PACKET
    r, o = ref[:n].reshape(-1, ENGINE_PACKET), out[:n].reshape(-1, ENGINE_PACKET)
    power = (r**2).sum(axis=1)
    voiced = power > 1e-6 * ENGINE_PACKET
    snr = 10 * np.log10(power[voiced] / np.maximum(((r - o) ** 2).sum(axis=1)[voiced], 1e-12))
    return float(np.clip(snr, -10, 35).mean())


def _pesq(ref: np.ndarray, out: np.ndarray) -> float | None:
    try:
        from pesq import pesq  # ITU-T P.862 (PyPI `pesq`); optional: the timing needs none of it
    except ImportError:
        return None
    n = min(ref.shape[0], out.shape[0])
    ref16 = soxr.resample(ref[:n], ENGINE_RATE, 16000, quality="HQ")
    out16 = soxr.resample(out[:n], ENGINE_RATE, 16000, quality="HQ")
    return float(pesq(16000, ref16, out16, "wb"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wav", nargs="?", type=Path, help="speech to encode (default: synthetic)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--complexity", default="0,1,2,3,4,5,7,10")
    parser.add_argument("--bitrate", type=int, default=32000)
    parser.add_argument("--applications", default="audio,voip,lowdelay")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    audio = _load(args.wav, args.seconds)
    applications = {
        "audio": opuslib.APPLICATION_AUDIO,
        "voip": opuslib.APPLICATION_VOIP,
        "lowdelay": opuslib.APPLICATION_RESTRICTED_LOWDELAY,
    }
    rows = []
    print("| application | complexity | µs a packet | segmental SNR (dB) | PESQ wb | lookahead (samples) |")
    print("|---|---|---|---|---|---|")
    for name in args.applications.split(","):
        for complexity in (int(c) for c in args.complexity.split(",")):
            fmt = OutputFormat("opus", ENGINE_RATE, args.bitrate, complexity)
            costs = []
            for _ in range(args.rounds):
                packets, cost = _encode(audio, fmt, applications[name])
                costs.append(cost)
            delay = int(opuslib.Encoder(ENGINE_RATE, 1, applications[name]).lookahead)
            decoded = _decode(packets, delay, audio.shape[0])
            row = {
                "application": name,
                "complexity": complexity,
                "us_per_packet": round(min(costs) * 1e6, 1),
                "segmental_snr_db": round(_segmental_snr(audio, decoded), 2),
                "pesq_wb": _pesq(audio, decoded),
                "lookahead": delay,
                "bytes_per_packet": round(sum(map(len, packets)) / len(packets), 1),
            }
            rows.append(row)
            pesq = "-" if row["pesq_wb"] is None else f"{row['pesq_wb']:.2f}"
            print(
                f"| {name} | {complexity} | {row['us_per_packet']} | {row['segmental_snr_db']} | {pesq} "
                f"| {delay} |",
                flush=True,
            )
    if args.out:
        args.out.write_text(
            json.dumps({"bitrate": args.bitrate, "seconds": args.seconds, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
