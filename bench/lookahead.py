"""Which send completes a session's text lookahead (`Lookahead`), as the server's checkpoint's own
tokenizer (`server_tokenizer`) cuts the text: first audio timed from that send is the server's part
of it, whatever the text's pace."""

from __future__ import annotations

import json
import logging
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from voicewire.bench.server_http import http_url

if TYPE_CHECKING:  # voicewire.engine brings torch, which the client processes do without
    from voicewire.engine.model.text_tokenizer import TextTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lookahead:
    """Which send completed a session's text lookahead: the `messages`-th text message, or with
    `at_end` the `end` after all `messages` (the text held fewer than `tokens` tokens)."""

    tokens: int
    messages: int
    at_end: bool

    @property
    def send(self) -> int:
        """Its index in `SessionRun.sent_s`, where `end` follows the text messages."""
        return self.messages if self.at_end else self.messages - 1


def lookahead_send(tokenizer: TextTokenizer, pieces: list[str], tokens: int) -> Lookahead:
    """The send after which the engine held `tokens` text tokens of `pieces`: it commits a word's
    tokens once the text after it shows the word is whole (engine/runtime/text_stream.py), and the rest at
    `end`; a segment starts with `tokens` committed (the scheduler's lookahead) or at its end."""
    from voicewire.engine.runtime.text_stream import IncrementalTokenizer  # torch: the parent only

    committed = IncrementalTokenizer(tokenizer)
    held = 0
    for i, piece in enumerate(pieces):
        held += len(committed.push(piece))
        if held >= tokens:
            return Lookahead(tokens, i + 1, at_end=False)
    return Lookahead(tokens, len(pieces), at_end=True)


def server_tokenizer(url: str) -> TextTokenizer | None:
    """The text tokenizer of the server's checkpoint (its folder, from GET /ready), or None when the
    folder is not on this machine or the server is not ready."""
    from voicewire.engine.model.text_tokenizer import cached_tokenizer

    try:
        with urllib.request.urlopen(f"{http_url(url)}/ready", timeout=30) as response:
            folder = json.load(response)["model"]
    except (OSError, KeyError, ValueError) as exc:  # HTTPError (503: not ready) is an OSError
        log.warning("no first audio from the lookahead: GET /ready gave no checkpoint folder (%s)", exc)
        return None
    if not Path(folder).is_dir():
        log.warning("no first audio from the lookahead: the server's checkpoint %s is not here", folder)
        return None
    return cached_tokenizer(folder)
