import gc
import time

import pytest

from voicewire.engine.runtime.gc_pauses import (
    ENGINE_THRESHOLDS,
    FLUSH_INTERVAL_S,
    GcPauses,
    freeze_startup_heap,
    space_young_collections,
)
from voicewire.engine.runtime.metrics import EngineMetrics


@pytest.fixture
def metrics():
    metrics = EngineMetrics()
    pauses = GcPauses(metrics.gc_pause, metrics.gc_full_pause)
    pauses.start()
    yield metrics, pauses
    pauses.close()


def _value(metrics: EngineMetrics, name: str) -> float:
    found = metrics.registry.get_sample_value(name)
    assert found is not None, name
    return found


def test_each_collection_is_timed_and_full_ones_apart(metrics) -> None:
    metrics, pauses = metrics
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    gc.collect()
    pauses.flush()
    every = _value(metrics, "voicewire_engine_gc_pause_seconds_count")
    assert every >= 4  # the four above, and any the allocations in between started
    assert 2 <= _value(metrics, "voicewire_engine_gc_full_pause_seconds_count") <= every
    assert 0 < _value(metrics, "voicewire_engine_gc_full_pause_seconds_sum")
    assert _value(metrics, "voicewire_engine_gc_full_pause_seconds_sum") <= _value(
        metrics, "voicewire_engine_gc_pause_seconds_sum"
    )


def test_the_pauses_reach_the_histograms_without_a_flush_call(metrics) -> None:
    metrics, _ = metrics
    gc.collect()
    # The notes go in from the pauses' own thread within its interval.
    time.sleep(3 * FLUSH_INTERVAL_S)
    assert _value(metrics, "voicewire_engine_gc_full_pause_seconds_count") >= 1


def test_close_stops_timing() -> None:
    metrics = EngineMetrics()
    pauses = GcPauses(metrics.gc_pause, metrics.gc_full_pause)
    pauses.start()
    pauses.close()
    assert pauses._on_gc not in gc.callbacks
    gc.collect()
    pauses.flush()
    assert _value(metrics, "voicewire_engine_gc_full_pause_seconds_count") == 0


def test_freeze_takes_the_live_heap_out_of_later_collections() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    kept = [Cycle() for _ in range(1000)]
    Cycle()  # garbage now: the freeze's own collection frees it, nothing frozen holds it
    try:
        frozen, seconds = freeze_startup_heap()
        assert frozen == gc.get_freeze_count() >= len(kept)
        assert seconds > 0
        tracked = gc.get_objects()
        assert not any(o is kept[0] for o in tracked)  # the collector no longer walks it
    finally:
        gc.unfreeze()
    assert any(o is kept[0] for o in gc.get_objects())


def test_young_collections_are_spaced_and_full_ones_kept() -> None:
    """After `space_young_collections`, 1,000 new cycles are not collected young (Python's 700
    would have), and the full collections' threshold is Python's."""
    before = gc.get_threshold()
    try:
        space_young_collections()
        assert gc.get_threshold() == (*ENGINE_THRESHOLDS, before[2])
        assert _collections_making_cycles(1000) == []
        gc.set_threshold(*before)
        assert _collections_making_cycles(1000)  # Python's own threshold collects young at least once
    finally:
        gc.set_threshold(*before)


def _collections_making_cycles(n: int) -> list[int]:
    """The generations collected while `n` new reference cycles are made, from a fresh count."""

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    collected: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    gc.collect()
    gc.callbacks.append(note)
    try:
        for _ in range(n):
            Cycle()
    finally:
        gc.callbacks.remove(note)
    return collected
