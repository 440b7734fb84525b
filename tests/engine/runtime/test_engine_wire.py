"""What crosses the socket between the engine process and its servers (engine_wire.py): a
message as `pack` makes it, and engine errors that keep their code across processes."""

import multiprocessing
import pickle

from voicewire.engine.errors import EngineError, EngineFull
from voicewire.engine.runtime import engine_wire as wire


def test_engine_errors_keep_their_code_across_processes() -> None:
    error = pickle.loads(pickle.dumps(EngineError("too slow", code="custom_code")))
    assert error.code == "custom_code" and error.message == "too slow"
    full = pickle.loads(pickle.dumps(EngineFull("no slots")))
    assert type(full) is EngineFull and full.code == "engine_full"


def test_a_message_crosses_as_pack_makes_it_pickled_at_protocol_5() -> None:
    ours, theirs = multiprocessing.Pipe()
    message = ([wire.Cancel(3), wire.Bye()], {3: 1920})  # a server's batch
    wire.write(ours, message)
    sent = theirs.recv_bytes()
    assert sent == wire.pack(message) and sent[:2] == b"\x80\x05"  # PROTO 5
    assert pickle.loads(sent) == message
