"""Code run in a fresh interpreter: what a module imports shows only there, since the test process
has imported whatever the tests before needed."""

import subprocess
import sys


def run_fresh(code: str, timeout_s: float = 300) -> str:
    """`code` under this interpreter in a child process; its stdout. Fails the test with the
    child's stderr if the child failed."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr
    return done.stdout
