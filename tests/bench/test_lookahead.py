"""The send that completes a session's text lookahead, by the checkpoint's tokenizer."""

from voicewire.bench.load import TEXT, text_pieces
from voicewire.bench.lookahead import Lookahead, lookahead_send
from voicewire.engine.model.text_tokenizer import TextTokenizer


def test_the_send_that_completes_the_lookahead(tiny_checkpoints) -> None:
    tok = TextTokenizer.from_folder(tiny_checkpoints["custom_voice"])
    pieces = text_pieces(8.0)
    assert "".join(pieces) == TEXT and pieces[:2] == ["Thanks ", "for "]
    # The engine commits a word's tokens with the space after it (the bench sends "word "), so the
    # lookahead is complete once the pieces sent so far hold that many tokens.
    for tokens in (1, 3, 8, 20):
        found = lookahead_send(tok, pieces, tokens)
        assert not found.at_end and found.send == found.messages - 1
        before = len(tok.encode("".join(pieces[: found.messages - 1]).rstrip(" ")))
        upto = len(tok.encode("".join(pieces[: found.messages]).rstrip(" ")))
        assert before < tokens <= upto, tokens
    # Text all at once: its one message; text shorter than the lookahead: the `end` after it.
    assert lookahead_send(tok, [TEXT], 3) == Lookahead(3, 1, at_end=False)
    short = lookahead_send(tok, ["Hi"], 64)
    assert short == Lookahead(64, 1, at_end=True) and short.send == 1
    # A word held back for want of the text after it counts only once that text is sent.
    assert lookahead_send(tok, ["Hello", " there "], 1) == Lookahead(1, 2, at_end=False)
