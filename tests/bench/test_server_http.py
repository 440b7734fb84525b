"""What `voicewire bench` reads from the server's /metrics."""

from voicewire.bench.server_http import process_shares


def test_process_shares_are_the_sessions_each_server_process_opened_in_the_level() -> None:
    before = {"101": 3.0, "102": 1.0, "103": 5.0}
    after = {"101": 7.0, "102": 1.0, "103": 5.0, "104": 2.0}  # 104 started during the level
    assert process_shares(before, after) == [4, 2]
    assert process_shares({}, {}) == []
