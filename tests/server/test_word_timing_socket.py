"""`words` and what the listener heard, on a real server (tiny checkpoint, CPU)."""

import asyncio
import itertools

import pytest

from tests.server.wsclient import JSON, MSGPACK, WireClient

START = {
    "voice": {"speaker": "vivian", "language": "english"},
    "sampling": {"greedy": True},
    "format": {"encoding": "pcm_s16le", "sample_rate": 24000},
    "max_frames": 40,
}
TEXT = "Hello there, this is a test. How are you?"


async def _session(url: str, subprotocol: str, text: str, **start) -> tuple[list[dict], dict]:
    """Speak `text` in pieces with word timing; every message of the context, and its end."""
    client = await WireClient.open(url, subprotocol)
    try:
        await client.start(**{**START, **start})
        for i in range(0, len(text), 6):
            await client.send({"type": "text", "context_id": "c", "text": text[i : i + 6]})
        await client.send({"type": "end", "context_id": "c"})
        last, seen = await client.until(lambda m: m["type"] in ("done", "error", "cancelled"))
        return seen, last
    finally:
        await client.close()


def _check_words(text: str, seen: list[dict], done: dict) -> list[dict]:
    """The words of a finished context, checked against the audio and progress before each."""
    sent, progressed, words = 0, 0, []
    for message in seen:
        if message["type"] == "audio":
            sent += message["samples"]
        elif message["type"] == "progress":
            progressed = message["text_end"]
        elif message["type"] == "words":
            for word in message["words"]:
                assert word["start"] <= sent, "a word starts in audio already sent"
                assert word["end_char"] <= progressed, "words line up with progress"
                words.append(word)
    assert done["type"] == "done", done
    assert words, "words were sent"
    covered = [i for w in words for i in range(w["start_char"], w["end_char"])]
    assert covered == sorted(set(covered)), "in order, each character once"
    assert {i for i, c in enumerate(text[:progressed]) if not c.isspace()} <= set(covered)
    assert max(covered) < progressed
    assert all(w["text"] == text[w["start_char"] : w["end_char"]] for w in words)
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(words))
    assert all(0 <= w["start"] <= w["end"] for w in words)
    assert words[-1]["end"] == done["samples"]
    return words


@pytest.mark.parametrize("subprotocol", [JSON, MSGPACK])
def test_words_cover_the_text_once_in_order_within_the_audio(server, subprotocol: str) -> None:
    seen, done = asyncio.run(_session(server.url, subprotocol, TEXT, timestamps="words"))
    words = _check_words(TEXT, seen, done)
    assert [w["text"] for w in words] == TEXT.split()[: len(words)]
    # each words message follows the audio (and progress) it belongs to
    kinds = [m["type"] for m in seen]
    assert kinds.index("words") > kinds.index("audio")


def test_chinese_words_are_characters(server) -> None:
    text = "你好，世界。今天天气很好！"
    seen, done = asyncio.run(_session(server.url, MSGPACK, text, timestamps="words"))
    words = _check_words(text, seen, done)
    assert [w["text"] for w in words] == ["你", "好，", "世", "界。", "今", "天", "天", "气", "很", "好！"][
        : len(words)
    ]


def test_no_words_unless_asked_and_bad_values_are_refused(server) -> None:
    seen, done = asyncio.run(_session(server.url, JSON, TEXT))
    assert done["type"] == "done" and "words" not in {m["type"] for m in seen}

    async def refused(**start) -> dict:
        client = await WireClient.open(server.url, JSON)
        try:
            await client.send({"type": "start", **START, **start})
            return await client.recv()
        finally:
            await client.close()

    assert asyncio.run(refused(timestamps="chars"))["code"] == "invalid_message"
    error = asyncio.run(refused(timestamps="words", layout="non_streaming"))
    assert error["code"] == "invalid_options" and "dual_track" in error["message"]


async def _cancel_after_words(
    url: str, subprotocol: str, report: bool, **start
) -> tuple[list[dict], int, int | None, dict]:
    """Speak with a flush (the context stays open), cancel once two words are out (after a
    playback report at the last word's start when `report`): the words, audio sent, the sample
    reported, cancelled."""
    client = await WireClient.open(url, subprotocol)
    try:
        await client.start(**{**START, **start})
        await client.send({"type": "text", "context_id": "c", "text": TEXT, "flush": True})
        sent, words = 0, []
        while len(words) < 2:
            message = await client.recv()
            assert message["type"] in ("audio", "progress", "words", "flushed"), message
            sent += message["samples"] if message["type"] == "audio" else 0
            words += message.get("words", [])
        played = words[-1]["start"] if report else None
        if played is not None:
            await client.send({"type": "playback", "context_id": "c", "played_samples": played})
        await client.send({"type": "cancel", "context_id": "c"})
        cancelled, seen = await client.until(lambda m: m["type"] == "cancelled")
        sent += sum(m["samples"] for m in seen if m["type"] == "audio")
        words += [w for m in seen if m["type"] == "words" for w in m["words"]]
        return words, sent, played, cancelled
    finally:
        await client.close()


@pytest.mark.parametrize("subprotocol", [JSON, MSGPACK])
def test_cancel_after_playback_reports_the_words_begun_before_the_played_sample(
    server, subprotocol: str
) -> None:
    words, _, played, cancelled = asyncio.run(
        _cancel_after_words(server.url, subprotocol, True, timestamps="words")
    )
    assert cancelled["heard_samples"] == played
    heard = [w for w in words if w["start"] < played]
    assert heard, "the report cuts after a word"
    assert cancelled["heard_text"] == (TEXT[: heard[-1]["end_char"]] if heard else "")


def test_cancel_without_playback_hears_all_audio_sent(server) -> None:
    words, sent, _, cancelled = asyncio.run(_cancel_after_words(server.url, JSON, False, timestamps="words"))
    assert cancelled["heard_samples"] == sent
    assert TEXT.startswith(cancelled["heard_text"])
    assert len(cancelled["heard_text"]) >= words[1]["end_char"]  # every word given starts before `sent`


def test_cancel_without_word_timing_still_says_where_it_cut(server) -> None:
    _, sent, cancelled = asyncio.run(_cancel_after_words_plain(server.url))
    assert cancelled["heard_samples"] == sent and cancelled["heard_text"] is None


async def _cancel_after_words_plain(url: str) -> tuple[None, int, dict]:
    client = await WireClient.open(url, JSON)
    try:
        await client.start(**START)
        await client.send({"type": "text", "context_id": "c", "text": TEXT, "flush": True})
        first = await client.recv()
        assert first["type"] == "audio", first
        await client.send({"type": "cancel", "context_id": "c"})
        cancelled, seen = await client.until(lambda m: m["type"] == "cancelled")
        return None, first["samples"] + sum(m["samples"] for m in seen if m["type"] == "audio"), cancelled
    finally:
        await client.close()


def test_a_finished_context_cancelled_while_it_still_plays_says_what_was_heard(server) -> None:
    """A barge-in after `done`, while the client still plays the turn: `cancelled` with nothing
    dropped and the words begun before the reported sample; a second cancel is context_closed."""

    async def run() -> tuple[list[dict], dict, int, dict, dict]:
        client = await WireClient.open(server.url, JSON)
        try:
            await client.start(**START, timestamps="words")
            await client.send({"type": "text", "context_id": "c", "text": TEXT})
            await client.send({"type": "end", "context_id": "c"})
            done, seen = await client.until(lambda m: m["type"] == "done")
            words = [w for m in seen if m["type"] == "words" for w in m["words"]]
            played = words[2]["start"] + 1  # the listener is in the third word
            await client.send({"type": "playback", "context_id": "c", "played_samples": played})
            await client.send({"type": "cancel", "context_id": "c"})
            cancelled, _ = await client.until(lambda m: m["type"] == "cancelled")
            await client.send({"type": "cancel", "context_id": "c"})
            again, _ = await client.until(lambda m: m["type"] == "error")
            return words, done, played, cancelled, again
        finally:
            await client.close()

    words, done, played, cancelled, again = asyncio.run(run())
    assert cancelled["samples_generated"] == done["samples"] and cancelled["samples_dropped"] == 0
    assert cancelled["heard_samples"] == played
    assert cancelled["heard_text"] == TEXT[: words[2]["end_char"]]
    assert again["code"] == "context_closed"
