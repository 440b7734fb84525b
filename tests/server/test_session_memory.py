"""A socket that lives for many turns (a voice agent's call) does not keep every finished context."""

import asyncio

from tests.server.conftest import running_server
from tests.server.wsclient import WireClient
from voicewire.server.config import ServerConfig
from voicewire.server.session import KEEP_FINISHED


def test_a_long_lived_socket_forgets_all_but_its_latest_finished_contexts(tiny_models) -> None:
    turns = KEEP_FINISHED + 6

    async def run(url: str):
        client = await WireClient.open(url)
        await client.start(voice={"speaker": "vivian"}, max_frames=1, sampling={"greedy": True})
        for turn in range(turns):
            await client.send({"type": "text", "context_id": f"t{turn}", "text": "Hi there."})
            await client.send({"type": "end", "context_id": f"t{turn}"})
            await client.until(lambda m, turn=turn: m["type"] == "done" and m["context_id"] == f"t{turn}")
        answers = {}
        for turn in (turns - 1, turns - KEEP_FINISHED, 0):  # the newest, the oldest kept, a forgotten one
            await client.send({"type": "text", "context_id": f"t{turn}", "text": "Again."})
            await client.send({"type": "ping", "id": turn})
            _, before = await client.until(lambda m: m["type"] == "pong")
            answers[turn] = [m.get("code", m["type"]) for m in before if m.get("context_id") == f"t{turn}"]
        await client.send({"type": "end", "context_id": "t0"})
        done, _ = await client.until(lambda m: m["type"] in ("done", "error") and m.get("context_id") == "t0")
        await client.close()
        return answers, done

    with running_server(tiny_models["custom_voice"], ServerConfig()) as server:
        answers, done = asyncio.run(run(server.url))
    assert answers[turns - 1] == answers[turns - KEEP_FINISHED] == ["context_closed"]
    assert "context_closed" not in answers[0] and done["type"] == "done"  # t0 was forgotten: a new turn
