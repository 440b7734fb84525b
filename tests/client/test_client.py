"""voicewire.client and `voicewire say` against a real server."""

import asyncio
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.server.conftest import running_server
from voicewire.client import Client, ServerError
from voicewire.engine.runtime.synthesis import SynthesisRequest, synthesize
from voicewire.server.cli import main
from voicewire.server.config import ServerConfig

TEXT = "Hello there, this is a test of the voice."
FRAMES = 24


@pytest.fixture(scope="module")
def server(tiny_models):
    with running_server(tiny_models["custom_voice"], ServerConfig()) as running:
        yield running


def test_contexts_decode_to_the_engine_audio(server, tiny_models) -> None:
    model = tiny_models["custom_voice"]
    expected = {
        speaker: synthesize(
            model,
            SynthesisRequest(text=TEXT, speaker=speaker, layout="dual_track", greedy=True, max_frames=FRAMES),
        ).audio
        for speaker in ("vivian",)
    }["vivian"]

    async def run():
        client = await Client.connect(
            server.url,
            voice={"speaker": "vivian"},
            format={"encoding": "opus", "sample_rate": 24000, "bitrate": 128000},
            sampling={"greedy": True},
            max_frames=FRAMES,
        )
        async with client:
            a, b = client.context(), client.context()

            async def speak(context):
                for word in TEXT.split(" "):
                    await context.push(word + (" " if not TEXT.endswith(word) else ""))
                await context.end()
                return await context.read_all()

            return await asyncio.gather(speak(a), speak(b)), a.done, a.progress

    (first, second), done, progress = asyncio.run(run())
    for audio in (first, second):
        assert audio.shape == (FRAMES * 1920,) == (done["samples"],)  # pre-skip and padding dropped
        assert np.corrcoef(audio, expected)[0, 1] > 0.97
    assert "".join(m["text"] for m in progress) and done["reason"] == "max_frames"


def test_errors_reach_the_caller(server) -> None:
    async def run():
        with pytest.raises(ServerError, match="invalid_voice"):
            await Client.connect(server.url, voice={"speaker": "nobody"})
        client = await Client.connect(server.url, voice={"speaker": "ryan"})
        async with client:
            context = client.context("c")
            await context.end()  # end before any text: the server has no such context
            with pytest.raises(ServerError, match="unknown_context") as info:
                await context.read_all()
            await client.send({"type": "speak"})
            await asyncio.sleep(0.3)
            return info.value, client.errors

    context_error, errors = asyncio.run(run())
    assert context_error.context_id == "c" and not context_error.fatal
    assert [e.code for e in errors] == ["unknown_type"]


def test_say_writes_a_wav(server, tmp_path: Path) -> None:
    out = tmp_path / "say.wav"
    assert (
        main(["say", TEXT, "--url", server.url, "--speaker", "serena", "--stream-text", "--out", str(out)])
        == 0
    )
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 24000 and audio.ndim == 1 and audio.shape[0] > 0 and audio.shape[0] % 1920 == 0
    assert float(np.sqrt(np.mean(audio**2))) > 1e-3


def test_say_without_a_server_is_a_clear_error(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    assert main(["say", "Hi.", "--url", "ws://127.0.0.1:9", "--out", str(tmp_path / "x.wav")]) == 2
    assert "could not reach http://127.0.0.1:9/v1/voices" in caplog.text  # asked for its speakers first


def test_say_without_a_speaker_speaks_as_the_first_one_over_an_http_address(
    server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    out = tmp_path / "first.wav"
    assert main(["say", "Hi.", "--url", server.http, "--out", str(out)]) == 0
    assert "speaking as aiden, the checkpoint's first speaker" in caplog.text  # sorted: aiden, dylan, ...
    assert sf.info(out).frames > 0


def test_say_to_an_address_that_is_not_one_is_one_line(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    assert main(["say", "Hi.", "--url", "127.0.0.1:8000", "--out", str(tmp_path / "x.wav")]) == 2
    assert caplog.records[-1].getMessage() == (
        "voicewire say: a server address starts with ws://, wss://, http:// or https://, not '127.0.0.1:8000'"
    )


def test_ws_and_http_addresses_convert_both_ways() -> None:
    from voicewire.client import http_url, ws_url

    assert ws_url("http://h:1/") == "ws://h:1" and ws_url("wss://h") == "wss://h"
    assert http_url("wss://h:2") == "https://h:2" and http_url("http://h") == "http://h"


def test_words_and_what_was_heard(server) -> None:
    async def run():
        client = await Client.connect(
            server.url,
            voice={"speaker": "ryan"},
            timestamps="words",
            sampling={"greedy": True},
            max_frames=FRAMES,
        )
        async with client:
            whole = client.context("whole")
            await whole.push(TEXT)
            await whole.end()
            audio = await whole.read_all()
            # A late barge-in: the turn is done, the listener is a little way into its audio.
            await whole.played(whole.words[1]["start"] + 1)
            late = await whole.cancel(wait=True)
            cut = client.context("cut")
            await cut.push(TEXT)
            first = await anext(aiter(cut))  # the first chunk, then: the listener heard all of it
            await cut.played(first.shape[0])
            await cut.cancel()
            await cut.read_all()
            return audio, whole, cut, first.shape[0], late

    audio, whole, cut, heard, late = asyncio.run(run())
    words = whole.words
    assert "".join(w["text"] for w in words) == TEXT.replace(" ", "")  # every word, once, in order
    assert all(TEXT[w["start_char"] : w["end_char"]] == w["text"] for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert words[-1]["end"] == audio.shape[0] == whole.done["samples"]
    assert whole.done["type"] == "done" and late is whole.cancelled and late["samples_dropped"] == 0
    assert late["heard_text"] == TEXT[: words[1]["end_char"]]
    assert cut.done["type"] == "cancelled" and cut.done["heard_samples"] == heard > 0
    # The same greedy text: the words that started before the heard sample, as in the whole turn.
    started = [w for w in words if w["start"] < heard]
    assert cut.done["heard_text"] == (TEXT[: started[-1]["end_char"]] if started else "")


def test_g711_decodes_to_the_reported_samples_and_mp3_is_refused_up_front(server) -> None:
    async def run(encoding: str) -> tuple[np.ndarray, dict]:
        fmt = {"encoding": encoding, "sample_rate": 8000}
        async with await Client.connect(
            server.url, voice={"speaker": "vivian"}, format=fmt, sampling={"greedy": True}, max_frames=FRAMES
        ) as client:
            context = client.context()
            await context.push(TEXT)
            await context.end()
            return await context.read_all(), context.done or {}

    (alaw, done_a), (mulaw, _) = asyncio.run(run("alaw")), asyncio.run(run("mulaw"))
    assert alaw.shape == (done_a["samples"],) == (FRAMES * 640,) == mulaw.shape
    assert np.corrcoef(alaw, mulaw)[0, 1] > 0.99  # the same greedy audio, two G.711 laws
    with pytest.raises(ValueError, match="not 'mp3'"):
        asyncio.run(run("mp3"))
