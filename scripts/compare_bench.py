"""Builds against each other: `voicewire bench` JSON reports as one Markdown table (a row per level).

Usage: python scripts/compare_bench.py TAG=REPORT.json [TAG=REPORT.json ...]
(scripts/ab_servers.sh prints it for its builds; `bench/report.py`'s `comparison` says what the columns are.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from voicewire.bench.report import comparison


def main(args: list[str]) -> int:
    if not args or any("=" not in arg for arg in args):
        print(__doc__, file=sys.stderr)
        return 2
    reports = {tag: json.loads(Path(path).read_text()) for tag, path in (arg.split("=", 1) for arg in args)}
    sys.stdout.write(comparison(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
