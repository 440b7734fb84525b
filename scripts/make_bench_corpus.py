"""Writes bench/corpus.py: the English word counts the real-size random checkpoints'
tokenizer is trained on (bench/tokenizer.py).

The counts come from English text any machine with Python has, counted once and committed, so the
tokenizer (and the checkpoints made with it) is the same on every machine, whatever its Python or
its /usr/share: Python's reference topics (pydoc_data), the docstrings of the standard library
(its tests left out) and the license texts in /usr/share/common-licenses. Pieces are counted as
Qwen2's split regex cuts them; only words of ASCII letters, with or without their leading space,
are kept, the most frequent first.

    .venv/bin/python scripts/make_bench_corpus.py
"""

from __future__ import annotations

import ast
import collections
import platform
import sysconfig
import textwrap
from pathlib import Path

from tokenizers import Regex, pre_tokenizers

from voicewire.engine.model.text_tokenizer import QWEN2_REGEX

KEEP = 4000  # pieces: enough for the everyday words of prose; the hand-written lists add the rest
OUT = Path(__file__).resolve().parent.parent / "engine" / "bench_corpus.py"


def texts() -> list[str]:
    import pydoc_data.topics

    found = [pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted([*stdlib.glob("*.py"), *stdlib.glob("*/*.py")]):
        if "test" in path.relative_to(stdlib).parts[0]:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    found.append(doc)
    licenses = Path("/usr/share/common-licenses")
    if licenses.is_dir():
        found += [p.read_text(errors="ignore") for p in sorted(licenses.iterdir()) if p.is_file()]
    return found


def main() -> None:
    split = pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False)
    counts: collections.Counter[str] = collections.Counter()
    for text in texts():
        counts.update(piece for piece, _ in split.pre_tokenize_str(text))
    words = [
        (piece, n)
        for piece, n in counts.items()
        if piece.removeprefix(" ").isalpha() and piece.isascii() and piece != " "
    ]
    words.sort(key=lambda item: (-item[1], item[0]))
    kept = words[:KEEP]
    spaced = " ".join(f"{piece[1:]} {n}" for piece, n in kept if piece.startswith(" "))
    bare = " ".join(f"{piece} {n}" for piece, n in kept if not piece.startswith(" "))

    def block(text: str) -> str:
        return "\n".join(textwrap.wrap(text, 100, break_long_words=False, break_on_hyphens=False))

    OUT.write_text(
        '"""English word counts for bench/tokenizer.py, written by scripts/make_bench_corpus.py\n'
        f"(Python {platform.python_version()}); regenerate rather than edit.\n\n"
        "Each holds pairs `word count`: SPACED for the word after a space (' word'), BARE for it alone.\n"
        '"""\n\n'
        f'SPACED = """\n{block(spaced)}\n"""\n\n'
        f'BARE = """\n{block(bare)}\n"""\n',
        encoding="utf-8",
    )
    print(f"wrote {len(kept)} of {len(words)} words to {OUT}")


if __name__ == "__main__":
    main()
