"""The simulated player both benchmarks and the engine's player_gap metric listen with."""

import pytest

from voicewire.engine.runtime.playback import START_BUFFER_S, SimulatedPlayer


def test_it_starts_at_its_buffer_then_waits_for_late_audio() -> None:
    player = SimulatedPlayer()
    assert player.start_buffer_s == START_BUFFER_S == 0.2
    assert player.add(0.0, 0.1) == 0.0 and player.ends_at is None
    assert player.buffered_s(5.0) == pytest.approx(0.1)  # nothing plays before the start
    assert player.add(0.05, 0.1) == 0.0  # 0.2 s in: it starts, and plays to 0.25
    assert player.ends_at == pytest.approx(0.25) and player.buffered_s(0.15) == pytest.approx(0.1)
    assert player.add(0.2, 0.1) == 0.0  # in time: plays to 0.35
    assert player.add(0.5, 0.1) == pytest.approx(0.15)  # dry from 0.35 to 0.5
    assert player.gaps == [(pytest.approx(0.3), pytest.approx(0.15))]  # after 0.3 s of audio
    assert player.ends_at == pytest.approx(0.6) and player.buffered_s(0.7) == pytest.approx(-0.1)


def test_a_listener_is_dry_now_until_it_starts_then_when_its_audio_runs_out() -> None:
    player = SimulatedPlayer()
    assert player.dry_at(3.0) == 3.0  # nothing yet: it waits now
    player.add(1.0, 0.1)
    assert player.dry_at(3.0) == 3.0  # short of its start buffer: still waiting
    player.add(1.0, 0.5)  # starts at 1.0 with 0.6 s: plays to 1.6
    assert player.dry_at(1.2) == pytest.approx(1.6)
    assert player.dry_at(2.0) == pytest.approx(1.6)  # dry since then
