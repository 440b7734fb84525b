"""A `voicewire bench` session's simulated player."""

from voicewire.bench.session import Underruns, simulated_underruns


def test_the_simulated_player_counts_gaps() -> None:
    steady = [(0.1 * i, 0.1) for i in range(20)]  # arrives exactly as fast as it plays
    assert simulated_underruns(steady) == Underruns(0, 0.0, ())
    late = [(0.0, 0.1), (0.05, 0.1), (0.1, 0.1), (1.0, 0.1), (1.05, 0.1), (2.0, 0.1)]
    # Starts at 0.05 with 0.2 s: plays to 0.35 (with the third piece), waits for the fourth at 1.0,
    # having played 0.3 s; then plays to 1.2 and waits for the sixth, having played 0.5 s.
    assert simulated_underruns(late) == Underruns(2, 1.45, (0.3, 0.5))
    assert simulated_underruns([(0.0, 0.05)]) == Underruns(0, 0.0, ())  # never reached its start buffer
