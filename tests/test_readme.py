"""The README's synopsis of the `voicewire` command lists every flag that `--help` shows."""

import argparse
import re
from pathlib import Path

import pytest

from voicewire.server.cli import build_parser

README = (Path(__file__).parents[1] / "README.md").read_text()


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _synopsis() -> str:
    section = README[README.index("## The `voicewire` command") :]
    start = section.index("```sh")
    return section[start : section.index("```", start + 5)]


@pytest.mark.parametrize("command", sorted(_commands()))
def test_the_synopsis_lists_every_flag(command: str) -> None:
    found = re.search(rf"voicewire {re.escape(command)} .*?(?=\n\n|\Z)", _synopsis(), re.S)
    assert found is not None, f"no synopsis line for voicewire {command}"
    flags = [
        flag
        for action in _commands()[command]._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    ]
    assert [flag for flag in flags if not re.search(rf"{re.escape(flag)}\b", found.group(0))] == []
