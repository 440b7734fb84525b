"""`voicewire bench-engine`'s run: sessions back to back per stream (the CLI's report is tested in
tests/server/test_cli.py)."""

import asyncio

import pytest

from voicewire.engine.bench import BenchSettings, run_bench
from voicewire.engine.config import EngineConfig
from voicewire.engine.engine import Engine


def test_sessions_run_back_to_back_per_stream(tiny_models) -> None:
    """2 streams x 3 sessions: 6 sessions' audio, and never more than 2 streams open at once, since
    each stream opens its next session only when the one before has ended."""
    settings = BenchSettings(streams=2, frames=5, text_rate=0, sessions_per_stream=3)
    with Engine(tiny_models["custom_voice"], EngineConfig(max_streams=4, kv_length=256)) as engine:
        open_stream, seeds, open_at_once = engine.open_stream, [], []

        def counting_open(voice, options=None, listener=None):
            open_at_once.append(engine.live_streams + 1)
            seeds.append(options.seed)
            return open_stream(voice, options, listener)

        engine.open_stream = counting_open
        report = asyncio.run(run_bench(engine, settings))
    assert report["sessions_per_stream"] == 3 and report["streams"] == 2
    assert report["audio_s"] == pytest.approx(2 * 3 * 5 * 0.08)
    assert len(open_at_once) == 6 and max(open_at_once) == 2
    assert sorted(seeds) == list(range(6))  # every session its own seed


@pytest.mark.parametrize("field", ["streams", "frames", "sessions_per_stream"])
def test_settings_below_one_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BenchSettings(**{field: 0})
