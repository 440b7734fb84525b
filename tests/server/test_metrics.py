"""server/metrics.py: the histograms `voicewire bench` reads beside the engine's, as a scrape has them."""

from voicewire.engine.runtime.metrics import histogram_report, read_histograms
from voicewire.server.metrics import SERVER_HISTOGRAMS, Metrics


def test_chunks_delivered_seconds_late_read_as_measured_not_clamped() -> None:
    """Under a burst chunks took seconds to reach the socket, most of it waiting for a codec thread
    (sessions 61 and 68 read a p95 of "2000 ms", the largest bound then). 10 chunks at 0.1 s and 10
    at 4 s: p95's rank 19 is the 9th of 10 in delivery's (3, 5] bucket, 3 + 2 x 9/10 s, and in the
    encode hop's (2, 5], 2 + 3 x 9/10 s."""
    metrics = Metrics()
    before = read_histograms(metrics.render().decode(), SERVER_HISTOGRAMS)
    assert set(before) == set(SERVER_HISTOGRAMS.values())
    for seconds in (0.1,) * 10 + (4.0,) * 10:
        metrics.chunk_delivery.observe(seconds)
        metrics.chunk_encode.observe(seconds)
    after = read_histograms(metrics.render().decode(), SERVER_HISTOGRAMS)
    report = histogram_report(before, after, SERVER_HISTOGRAMS)
    assert report["chunk_delivery_ms"] == {"count": 20, "total": 41000.0, "p50": 100.0, "p95": 4800.0}
    assert report["chunk_encode_ms"] == {"count": 20, "total": 41000.0, "p50": 100.0, "p95": 4700.0}
