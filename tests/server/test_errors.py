"""Every malformed or out-of-order message gets its documented error code; other contexts go on."""

import asyncio
import logging
import re
from pathlib import Path

import msgpack
import pytest

from tests.server.conftest import running_server
from tests.server.wsclient import JSON, MSGPACK, WireClient
from voicewire.server.config import ServerConfig
from voicewire.server.errors import CODES

DOC = Path(__file__).parents[2] / "docs" / "protocol.md"
LONG = "Streaming goes on while errors come and go. " * 8
START = {"voice": {"speaker": "vivian"}, "sampling": {"seed": 1}, "max_frames": 3000}


def _raw(message) -> bytes:
    return msgpack.packb(message)


# (name, frame to send, expected code, expected context_id). "live" streams all the while;
# "closed" was ended before the list starts.
MALFORMED = [
    ("not msgpack", b"\xc1\xc1\xc1", "bad_message", None),
    ("truncated msgpack", _raw({"type": "text", "context_id": "x", "text": "hi"})[:-2], "bad_message", None),
    ("a list", _raw(["text", "x"]), "bad_message", None),
    ("a number", _raw(42), "bad_message", None),
    ("a text frame", '{"type": "ping"}', "wrong_frame_type", None),
    ("no type", _raw({"context_id": "live", "text": "x"}), "invalid_message", "live"),
    ("unknown type", _raw({"type": "speak", "text": "x"}), "unknown_type", None),
    ("type not a string", _raw({"type": 5}), "unknown_type", None),
    ("text without context", _raw({"type": "text", "text": "x"}), "invalid_message", None),
    ("text without text", _raw({"type": "text", "context_id": "live"}), "invalid_message", "live"),
    ("text is a number", _raw({"type": "text", "context_id": "live", "text": 5}), "invalid_message", "live"),
    ("text is bytes", _raw({"type": "text", "context_id": "live", "text": b"x"}), "invalid_message", "live"),
    (
        "unknown field",
        _raw({"type": "text", "context_id": "live", "text": "x", "pitch": 2}),
        "invalid_message",
        "live",
    ),
    (
        "speed out of range",
        _raw({"type": "text", "context_id": "live", "text": "x", "speed": 9}),
        "invalid_message",
        "live",
    ),
    (
        "speed changed mid-context",
        _raw({"type": "text", "context_id": "live", "text": "x", "speed": 2}),
        "invalid_options",
        "live",
    ),
    (
        "flush is a string",
        _raw({"type": "text", "context_id": "live", "text": "x", "flush": "yes"}),
        "invalid_message",
        "live",
    ),
    ("empty context id", _raw({"type": "text", "context_id": "", "text": "x"}), "invalid_message", None),
    ("context id too long", _raw({"type": "flush", "context_id": "c" * 65}), "invalid_message", None),
    ("context id a number", _raw({"type": "end", "context_id": 7}), "invalid_message", None),
    ("flush unknown context", _raw({"type": "flush", "context_id": "nope"}), "unknown_context", "nope"),
    ("end unknown context", _raw({"type": "end", "context_id": "nope"}), "unknown_context", "nope"),
    ("cancel unknown context", _raw({"type": "cancel", "context_id": "nope"}), "unknown_context", "nope"),
    (
        "playback unknown context",
        _raw({"type": "playback", "context_id": "nope", "played_samples": 1}),
        "unknown_context",
        "nope",
    ),
    (
        "negative playback",
        _raw({"type": "playback", "context_id": "live", "played_samples": -1}),
        "invalid_message",
        "live",
    ),
    ("ping id a map", _raw({"type": "ping", "id": {"a": 1}}), "invalid_message", None),
    ("deeply nested", b"\x91" * 3000 + b"\xc0", "bad_message", None),  # msgpack's stack holds 1024
    ("deeply nested ping id", b"\x82\xa4type\xa4ping\xa2id" + b"\x91" * 3000 + b"\xc0", "bad_message", None),
    ("second start", _raw({"type": "start"}), "already_started", None),
    (
        "oversize text",
        _raw({"type": "text", "context_id": "live", "text": "x" * 501}),
        "text_too_long",
        "live",
    ),
    (
        "oversize frame",
        _raw({"type": "text", "context_id": "live", "text": "x" * 5000}),
        "message_too_large",
        None,
    ),
    (
        "text after end",
        _raw({"type": "text", "context_id": "closed", "text": "more"}),
        "context_closed",
        "closed",
    ),
    ("flush after end", _raw({"type": "flush", "context_id": "closed"}), "context_closed", "closed"),
    ("end after end", _raw({"type": "end", "context_id": "closed"}), "context_closed", "closed"),
    (
        "too many contexts",
        _raw({"type": "text", "context_id": "fourth", "text": "hi"}),
        "too_many_contexts",
        "fourth",
    ),
]


def test_each_malformed_message_gets_its_code_while_another_context_streams(server) -> None:
    assert len(MALFORMED) >= 25 and server.config.max_contexts == 3

    async def run():
        client = await WireClient.open(server.url, MSGPACK)
        await client.start(**START)
        await client.send({"type": "text", "context_id": "live", "text": LONG})
        await client.send({"type": "text", "context_id": "closed", "text": LONG})
        await client.send({"type": "end", "context_id": "closed"})
        await client.send({"type": "text", "context_id": "third", "text": LONG})
        await client.until(lambda m: m["type"] == "audio" and m["context_id"] == "live")  # it streams
        results = []
        for name, frame, _, _ in MALFORMED:
            await client.ws.send(frame)
            error, before = await client.until(lambda m: m["type"] == "error")
            live_audio = sum(1 for m in before if m["type"] == "audio" and m["context_id"] == "live")
            results.append((name, error, live_audio))
        # "live" is still streaming after all of that.
        audio, _ = await client.until(lambda m: m["type"] == "audio" and m["context_id"] == "live")
        await client.close()
        return results, audio

    results, audio = asyncio.run(run())
    for (name, _, code, context), (_, error, _) in zip(MALFORMED, results, strict=True):
        assert (error["code"], error["context_id"], error["fatal"]) == (code, context, False), name
        assert error["message"], name
    assert audio["context_id"] == "live" and audio["seq"] > 0  # and it still streams after them all


@pytest.mark.parametrize(
    ("name", "message", "code"),
    [
        ("text before start", {"type": "text", "context_id": "a", "text": "hi"}, "not_started"),
        ("flush before start", {"type": "flush", "context_id": "a"}, "not_started"),
        (
            "bad sample rate",
            {"type": "start", "format": {"encoding": "opus", "sample_rate": 44100}},
            "invalid_format",
        ),
        (
            "bad mulaw rate",
            {"type": "start", "format": {"encoding": "mulaw", "sample_rate": 16000}},
            "invalid_format",
        ),
        ("bad encoding", {"type": "start", "format": {"encoding": "flac"}}, "invalid_message"),
        ("unknown speaker", {"type": "start", "voice": {"speaker": "nobody"}}, "invalid_voice"),
        (
            "unknown language",
            {"type": "start", "voice": {"speaker": "vivian", "language": "klingon"}},
            "invalid_voice",
        ),
        (
            "instruct on 0.6B",
            {"type": "start", "voice": {"speaker": "vivian", "instruct": "Happy."}},
            "invalid_voice",
        ),
        (
            "embedding on CustomVoice",
            {"type": "start", "voice": {"speaker_embedding": [0.0] * 64}},
            "invalid_voice",
        ),
        ("zero temperature", {"type": "start", "sampling": {"temperature": 0}}, "invalid_message"),
        (
            "greedy with seed",
            {"type": "start", "voice": {"speaker": "ryan"}, "sampling": {"greedy": True, "seed": 3}},
            "invalid_options",
        ),
        ("unknown start field", {"type": "start", "speed": 1.5}, "invalid_message"),
    ],
)
def test_start_and_order_errors(server, name: str, message: dict, code: str) -> None:
    async def run():
        client = await WireClient.open(server.url, JSON)
        await client.send(message)
        error = await client.recv()
        # The session is still usable after the error.
        ready = await client.start(voice={"speaker": "vivian"})
        await client.close()
        return error, ready

    error, ready = asyncio.run(run())
    assert (error["type"], error["code"], error["fatal"]) == ("error", code, False), name
    assert ready["type"] == "ready"


def test_json_frame_errors(server) -> None:
    async def run():
        client = await WireClient.open(server.url, JSON)
        await client.ws.send(b'{"type": "ping"}')
        binary = await client.recv()
        await client.ws.send("{not json")
        broken = await client.recv()
        await client.send({"type": "ping", "id": "p1"})
        pong = await client.recv()
        await client.close()
        return binary, broken, pong

    binary, broken, pong = asyncio.run(run())
    assert binary["code"] == "wrong_frame_type" and broken["code"] == "bad_message"
    assert pong == {"type": "pong", "id": "p1"}


DEEP = 50_000  # nested arrays: past json's recursion limit on any Python, in a 100 kB frame


@pytest.fixture(scope="module")
def roomy(tiny_models):
    """A server whose frames may hold a deeply nested JSON document."""
    config = ServerConfig(max_message_bytes=2**18)
    with running_server(tiny_models["custom_voice"], config) as running:
        yield running


def test_a_deeply_nested_json_frame_is_not_fatal(roomy, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    frames = {
        "nested arrays": "[" * DEEP + "]" * DEEP,
        "nested in ping.id": '{"type": "ping", "id": ' + "[" * DEEP + "]" * DEEP + "}",
    }

    async def run():
        client = await WireClient.open(roomy.url, JSON)
        errors = {}
        for name, frame in frames.items():
            await client.ws.send(frame)
            errors[name] = await client.recv()
        # The session goes on: it answers, starts and speaks.
        await client.send({"type": "ping", "id": "after"})
        pong = await client.recv()
        await client.start(**START)
        await client.send({"type": "text", "context_id": "c", "text": "Hi there."})
        audio, _ = await client.until(lambda m: m["type"] == "audio")
        await client.send({"type": "cancel", "context_id": "c"})
        await client.close()
        return errors, pong, audio

    errors, pong, audio = asyncio.run(run())
    for name, error in errors.items():
        assert (error["type"], error["code"], error["fatal"], error["context_id"]) == (
            "error",
            "bad_message",
            False,
            None,
        ), name
        assert "too deeply" in error["message"], name
    assert pong == {"type": "pong", "id": "after"} and audio["context_id"] == "c"
    # A client's mistake is a log line, not a traceback.
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert any("bad_message" in r.getMessage() for r in caplog.records)


def test_every_code_is_documented() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", DOC.read_text(), flags=re.M))
    assert set(CODES) <= documented, sorted(set(CODES) - documented)
    assert {code for _, _, code, _ in MALFORMED} <= set(CODES)
