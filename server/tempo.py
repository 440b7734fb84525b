"""Speaking rate without a pitch change: streaming WSOLA (waveform-similarity overlap-add).

Output frames of N samples, Hann-windowed, are overlap-added every N/2 samples; frame k is read
from the input near k * N/2 * speed, shifted by up to `tolerance` samples to the place that best
continues the previous frame's waveform, so periods line up and nothing clicks. It runs on
chunks as they come and gives the same samples as on the whole signal at once. `Tempo` is a
socket context's: stretched in pieces between flushes, with positions mapped onto its output.
"""

from __future__ import annotations

import numpy as np


class TimeStretch:
    def __init__(self, speed: float, frame: int = 960, tolerance: int = 240) -> None:
        if not 0.25 <= speed <= 4.0:
            raise ValueError(f"speed must be in [0.25, 4], got {speed}")
        self.speed = speed
        self.frame = frame
        self.hop = frame // 2
        self.tolerance = tolerance
        self.window = np.hanning(frame + 1)[:frame].astype(np.float32)  # periodic: halves sum to 1
        # Leading zeros: room for frame 0 to shift, and half a frame so that the signal starts
        # where windows already sum to one (that first half-frame of output is dropped).
        self._input = np.zeros(tolerance + self.hop, np.float32)
        self._skip = self.hop
        self._received = 0  # real input samples
        self._sent = 0  # output samples returned
        self._dropped = 0  # input samples before _input[0]
        self._k = 0  # next output frame
        self._prev = -1  # input start of the previous frame (absolute), -1 before the first
        self._tail = np.zeros(self.hop, np.float32)  # second half of the last frame, windowed

    def _nominal(self, k: int) -> int:
        return self.tolerance + round(k * self.hop * self.speed)

    def process(self, samples: np.ndarray, final: bool = False) -> np.ndarray:
        """Feed samples; returns the output that is complete. `final` pads and flushes the rest."""
        samples = np.asarray(samples, np.float32)
        self._received += samples.shape[0]
        self._input = np.concatenate((self._input, samples))
        end = self._dropped + self._input.shape[0]
        if final:
            self._input = np.concatenate((self._input, np.zeros(self.frame + 2 * self.tolerance, np.float32)))
        out = []
        while True:
            nominal = self._nominal(self._k)
            if final and nominal >= end + self.tolerance:
                break
            if self._dropped + self._input.shape[0] < nominal + self.tolerance + self.frame:
                break  # not enough input yet
            start = self._best_start(nominal)
            piece = self._input[start - self._dropped : start - self._dropped + self.frame] * self.window
            out.append(self._tail + piece[: self.hop])
            self._tail = piece[self.hop :].copy()
            self._prev = start
            self._k += 1
            keep_from = self._nominal(self._k) - self.tolerance
            if self._prev >= 0:
                keep_from = min(keep_from, self._prev + self.hop)
            cut = max(0, keep_from - self._dropped)
            self._input = self._input[cut:]
            self._dropped += cut
        if final:
            out.append(self._tail)
            self._tail = np.zeros(self.hop, np.float32)
        result = np.concatenate(out) if out else np.zeros(0, np.float32)
        if self._skip:
            cut = min(self._skip, result.shape[0])
            result, self._skip = result[cut:], self._skip - cut
        if final:  # exactly the input's length over the speed
            result = result[: max(0, round(self._received / self.speed) - self._sent)]
        self._sent += result.shape[0]
        return result

    def _best_start(self, nominal: int) -> int:
        if self._prev < 0:
            return nominal
        # The natural continuation of the previous frame, and where the input looks most like it.
        natural = self._prev + self.hop
        base = natural - self._dropped
        target = self._input[base : base + self.hop]
        lo = nominal - self.tolerance - self._dropped
        region = self._input[lo : lo + 2 * self.tolerance + self.hop]
        scores = np.correlate(region, target, mode="valid")
        return nominal - self.tolerance + int(np.argmax(scores))


class Tempo:
    """One context's speaking rate: its 24 kHz audio stretched chunk by chunk, and positions in
    the engine's audio mapped onto the stretched timeline.

    The stretch runs 30 to 80 ms behind its input (it needs the input past a frame to place it).
    A `boundary` (the engine's flushed chunk: the audio of everything before a flush is complete)
    ends the stretch there and starts a new one, so that the flushed audio goes out whole instead of
    waiting for the next text. Each stretch gives exactly its input's length over the speed, so a
    position maps exactly: the output before the last boundary, plus the input since it over the
    speed."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self._stretch = TimeStretch(speed)
        self._received = 0  # input samples
        # (input samples before the current stretch, output samples the ones before it gave): one
        # tuple, so that `position` on the event loop never sees half of it while `process` runs
        # in a worker thread (a cancel's count).
        self._base = (0, 0)

    def process(self, pcm: np.ndarray, final: bool, boundary: bool = False) -> np.ndarray:
        """Feed a chunk; returns the stretched output that is complete."""
        self._received += pcm.shape[0]
        out = self._stretch.process(pcm, final=final or boundary)
        if boundary and not final:
            self._base = (self._received, self.position(self._received))
            self._stretch = TimeStretch(self.speed)
        return out

    def position(self, samples: int) -> int:
        """Input sample `samples` (counted from the stream's start) on the output timeline."""
        base_in, base_out = self._base
        return base_out + round((samples - base_in) / self.speed)
