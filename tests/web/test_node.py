"""The player's pure parts (msgpack subset, jitter buffer), tested in Node with node:test."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_node_suites_pass() -> None:
    done = subprocess.run(
        ["node", "--test", *sorted(str(p) for p in HERE.glob("*.test.mjs"))],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "VOICEWIRE_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# pass 12" in done.stdout
