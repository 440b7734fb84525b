"""What every session of a `voicewire bench` level does and sends, and the checks on it."""

import pytest

from voicewire.bench.load import LOOKAHEAD_TOKENS, Load, start_message
from voicewire.engine.config import EngineConfig
from voicewire.server.cli import main


def test_the_start_message_asks_for_the_chunk_schedule() -> None:
    plain = start_message(Load("ws://x", 20, 0.0, "aiden"), seed=3)
    assert plain == {
        "type": "start",
        "voice": {"speaker": "aiden"},
        "format": {"encoding": "opus", "sample_rate": 48000, "complexity": 5},
        "sampling": {"seed": 3},
        "max_frames": 20,
        "suppress_eos": True,
        # Always stated: the bench times first audio from the text that fills this lookahead.
        "buffering": {"lookahead_tokens": 3},
    }
    scheduled = start_message(
        Load("ws://x", 20, 0.0, None, chunks=(1, 2, 2, 4), lookahead_tokens=5, opus_complexity=0), seed=3
    )
    assert scheduled["voice"] == {}
    assert scheduled["format"] == {"encoding": "opus", "sample_rate": 48000, "complexity": 0}
    assert scheduled["buffering"] == {
        "lookahead_tokens": 5,
        "first_chunk_frames": 1,
        "chunk_frames": [2, 2, 4],
    }
    with pytest.raises(ValueError, match="opus_complexity"):
        Load("ws://x", 20, 0.0, None, opus_complexity=11)
    with pytest.raises(ValueError, match="lookahead_tokens"):
        Load("ws://x", 20, 0.0, None, lookahead_tokens=0)
    for bad in ((4,), (1, 0), (1, 33), (1, *[2] * 9)):
        with pytest.raises(ValueError, match="chunks"):
            Load("ws://x", 20, 0.0, None, chunks=bad)


def test_the_bench_lookahead_is_the_engines_default() -> None:
    assert LOOKAHEAD_TOKENS == EngineConfig().lookahead_tokens


@pytest.mark.parametrize("flag", ["1,two", "4", "1,0", "1,40", "1,2,2,2,2,2,2,2,2,2"])
def test_bench_refuses_a_malformed_chunk_schedule(flag: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):  # argparse, before any server or engine starts
        main(["bench", "--chunks", flag])
    assert "--chunks: expected frame counts like 1,2,4,8 (" in capsys.readouterr().err


def test_bench_refuses_a_negative_cancel_every(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="cancel_every must be 0"):
        Load("ws://127.0.0.1:1", 4, 0.0, None, cancel_every=-1)
    # Before any connection or engine: nothing listens at that address.
    assert main(["bench", "--url", "ws://127.0.0.1:1", "--streams", "1", "--cancel-every", "-1"]) == 2
    assert "--cancel-every must be 0 (no cancels) or more" in caplog.text


@pytest.mark.parametrize("interval", [-1.0, float("nan")])
def test_bench_refuses_a_session_interval_below_zero(
    interval: float, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="session_interval_s must be 0"):
        Load("ws://127.0.0.1:1", 4, 0.0, None, session_interval_s=interval)
    args = ["bench", "--url", "ws://127.0.0.1:1", "--streams", "1", "--session-interval", str(interval)]
    assert main(args) == 2
    assert "--session-interval must be 0 (back to back) or more" in caplog.text


def test_bench_refuses_an_opus_complexity_outside_0_to_10(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):  # argparse, before any server or engine starts
        main(["bench", "--opus-complexity", "11"])
    assert "--opus-complexity: invalid choice: 11" in capsys.readouterr().err
