import numpy as np
import pytest

from voicewire.server.tempo import Tempo, TimeStretch

RATE = 24000


def _sine(seconds: float = 2.0, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _pitch(x: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.shape[0])))
    return float(np.argmax(spectrum)) * RATE / x.shape[0]


@pytest.mark.parametrize("speed", [0.5, 0.8, 1.25, 2.0])
def test_length_changes_and_pitch_does_not(speed: float) -> None:
    x = _sine()
    y = TimeStretch(speed).process(x, final=True)
    assert y.shape[0] == round(x.shape[0] / speed)
    assert abs(_pitch(y[1000:-1000]) - 220.0) < 2.0
    assert np.sqrt(np.mean(y[1000:-1000] ** 2)) == pytest.approx(np.sqrt(np.mean(x**2)), rel=0.02)
    # No clicks: no step larger than the sine's own steepest one.
    assert np.abs(np.diff(y)).max() <= np.abs(np.diff(x)).max() * 1.05


def test_chunks_give_the_samples_of_the_whole() -> None:
    x = _sine(1.5, 180.0) + 0.1 * np.random.default_rng(0).standard_normal(36000).astype(np.float32)
    whole = TimeStretch(1.3).process(x, final=True)
    stretch, parts, start = TimeStretch(1.3), [], 0
    for size in np.random.default_rng(1).integers(1, 4000, size=100):
        stop = min(x.shape[0], start + int(size))
        parts.append(stretch.process(x[start:stop], final=stop == x.shape[0]))
        start = stop
        if start == x.shape[0]:
            break
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_out_of_range_speed_is_refused() -> None:
    with pytest.raises(ValueError, match=r"speed must be in \[0.25, 4\]"):
        TimeStretch(5.0)


def test_a_context_tempo_restarts_at_a_boundary_and_maps_positions_exactly() -> None:
    """Tempo: chunks with a boundary (a flush) in between give the two parts' stretches end to end,
    each exactly its input over the speed, and a position maps onto that timeline."""
    x = _sine(1.5, 180.0) + 0.1 * np.random.default_rng(2).standard_normal(36000).astype(np.float32)
    speed, cut = 1.3, 15000
    tempo = Tempo(speed)
    parts = [
        tempo.process(x[:7000], final=False),
        tempo.process(x[7000:cut], final=False, boundary=True),
        tempo.process(x[cut:30000], final=False),
    ]
    assert tempo.position(cut) == round(cut / speed) == sum(p.shape[0] for p in parts[:2])
    assert tempo.position(30000) == round(cut / speed) + round((30000 - cut) / speed)
    parts.append(tempo.process(x[30000:], final=True))
    first, second = (TimeStretch(speed).process(part, final=True) for part in (x[:cut], x[cut:]))
    np.testing.assert_array_equal(np.concatenate(parts), np.concatenate((first, second)))
    assert tempo.position(x.shape[0]) == first.shape[0] + second.shape[0]
