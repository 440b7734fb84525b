import base64
import json
import re
from pathlib import Path

import msgpack
import pytest

from voicewire.server import protocol as p
from voicewire.server.errors import ProtocolError
from voicewire.server.wire import JSON, MSGPACK, Codec

DOC = Path(__file__).parents[2] / "docs" / "protocol.md"


def test_both_codecs_decode_the_same_message() -> None:
    message = {"type": "text", "context_id": "t1", "text": "Hi", "flush": True}
    from_msgpack = Codec(MSGPACK).decode(None, msgpack.packb(message))
    from_json = Codec(JSON).decode(json.dumps(message), None)
    assert from_msgpack == from_json == p.Text(type="text", context_id="t1", text="Hi", flush=True)


def test_audio_is_raw_in_msgpack_and_base64_in_json() -> None:
    audio = p.Audio(context_id="c", seq=3, pts=960, samples=960, data=b"\x00\xffopus")
    packed = msgpack.unpackb(Codec(MSGPACK).encode(audio))
    assert packed["data"] == b"\x00\xffopus" and packed["type"] == "audio" and packed["seq"] == 3
    as_json = json.loads(Codec(JSON).encode(audio))
    assert base64.b64decode(as_json["data"]) == b"\x00\xffopus" and as_json["pts"] == 960


def test_the_documented_bytes_are_what_msgpack_makes() -> None:
    documented = re.search(r"is\n`((?:[0-9a-f]{2} ?)+)`", DOC.read_text()).group(1)
    assert bytes.fromhex(documented) == msgpack.packb({"type": "text", "context_id": "t1", "text": "Hi"})


def test_validation_names_the_field() -> None:
    with pytest.raises(ProtocolError) as info:
        Codec(MSGPACK).decode(None, msgpack.packb({"type": "text", "context_id": "a", "txt": "x"}))
    assert info.value.code == "invalid_message"
    assert "missing field 'text'" in info.value.message and "unknown field 'txt'" in info.value.message
    assert info.value.context_id == "a"


DEEP = 50_000  # levels; far past json's recursion limit and msgpack's 1024-level stack


@pytest.mark.parametrize(
    ("name", "subprotocol", "frame"),
    [
        ("json arrays", JSON, "[" * DEEP + "]" * DEEP),
        ("json inside ping.id", JSON, '{"type": "ping", "id": ' + "[" * DEEP + "]" * DEEP + "}"),
        ("json maps", JSON, '{"a": ' * DEEP + "1" + "}" * DEEP),
        ("msgpack arrays", MSGPACK, b"\x91" * DEEP + b"\xc0"),
        ("msgpack inside ping.id", MSGPACK, b"\x82\xa4type\xa4ping\xa2id" + b"\x91" * DEEP + b"\xc0"),
    ],
)
def test_a_deeply_nested_frame_is_a_bad_message(name: str, subprotocol: str, frame: str | bytes) -> None:
    codec = Codec(subprotocol)
    with pytest.raises(ProtocolError) as info:
        codec.decode(*((frame, None) if isinstance(frame, str) else (None, frame)))
    assert (info.value.code, info.value.fatal, info.value.context_id) == ("bad_message", False, None), name
    assert "too deeply" in info.value.message, name
    # The codec still decodes the next frame.
    ping = {"type": "ping", "id": "p1"}
    after = (
        codec.decode(json.dumps(ping), None)
        if subprotocol == JSON
        else codec.decode(None, msgpack.packb(ping))
    )
    assert after == p.Ping(type="ping", id="p1")
