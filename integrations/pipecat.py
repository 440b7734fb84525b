"""voicewire as a Pipecat TTS service (`pip install 'voicewire[pipecat]'`; docs/integrations.md).

    tts = VoicewireTTSService(url="ws://127.0.0.1:8000", voice="vivian")

One socket per service, one protocol context per turn: text goes out as Pipecat aggregates it
(sentences by default, or tokens with `text_aggregation_mode=TextAggregationMode.TOKEN`), the
turn's end sends `end`, and an interruption sends `cancel`. Audio comes back as 16-bit PCM at
the pipeline's output rate; the server's word timing becomes Pipecat's word timestamps, so the
assistant's context holds the words that were played, not the whole reply.

If the server goes away, the turn in progress ends and the next one connects again. A refused
key, voice or format is a permanent error: the service stops taking work until it is replaced.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from typing import Any

import msgpack
from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.protocol import State
from websockets.typing import Subprotocol

from voicewire.integrations.common import (
    MSGPACK,
    Sampling,
    VoicewireError,
    connect_headers,
    handshake,
    language_name,
    start_message,
    stream_url,
)

__all__ = ["Sampling", "VoicewireTTSService"]

READY_TIMEOUT_S = 30.0  # `ready` waits for the voice (a stored one is loaded from the library)
# Errors about one turn's request, not the service: the next turn may well succeed.
_BUSY = frozenset({"engine_full", "too_many_contexts", "too_many_sessions"})
_TURN = frozenset(
    {"text_too_long", "invalid_message", "context_closed", "unknown_context", "message_too_large"}
)


def _category(error: VoicewireError, refused_start: bool) -> ErrorCategory:
    """Pipecat's reading of a server error: a refused start is permanent (Pipecat then stops giving
    the service work); an error about one turn is not."""
    if error.code == "unauthorized":
        return ErrorCategory.AUTHENTICATION
    if error.code == "forbidden_origin":
        return ErrorCategory.AUTHORIZATION
    if refused_start and error.permanent:
        return ErrorCategory.INVALID_REQUEST
    if error.code in _BUSY:
        return ErrorCategory.RATE_LIMIT
    if error.code in _TURN:
        return ErrorCategory.APPLICATION
    return ErrorCategory.SERVER


class VoicewireTTSService(WebsocketTTSService):
    """Pipecat's websocket TTS service speaking voicewire's protocol v1.

    Args:
        url: the server's base address (ws://, wss://, http:// or https://).
        voice: a speaker name (CustomVoice checkpoints) or a stored voice id (`voice_...`).
        language: a Pipecat `Language`, a BCP 47 code or a name ("english"); None: the model's
            own detection.
        api_key: the server's API key (default: $VOICEWIRE_API_KEY; none for an open server).
        sample_rate: output rate (8000, 16000, 22050, 24000, 32000, 44100 or 48000); default: the pipeline's.
        sampling: the talker's sampling; a `seed` makes each turn repeatable.
        text_aggregation_mode: SENTENCE (Pipecat's default) or TOKEN: voicewire speaks text as it
            arrives, so TOKEN starts speaking sooner.
    """

    _websocket: ClientConnection | None  # Pipecat's, holding this service's session once `ready`

    def __init__(
        self,
        *,
        voice: str,
        url: str = "ws://127.0.0.1:8000",
        language: Language | str | None = None,
        api_key: str | None = None,
        sample_rate: int | None = None,
        sampling: Sampling | None = None,
        text_aggregation_mode: TextAggregationMode | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            # One context holds a whole turn: its sentences must not run into each other.
            append_trailing_space=True,
            push_text_frames=False,  # word timestamps make the text frames, as the words play
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model=None, voice=voice, language=language),
            # This service reconnects on the next turn instead (see _receive_task_handler).
            reconnect_on_error=False,
            **kwargs,
        )
        self._url = stream_url(url)
        self._api_key = api_key if api_key is not None else os.environ.get("VOICEWIRE_API_KEY")
        self._sampling = sampling
        self._receive_task: asyncio.Task | None = None
        self._open: dict[str, str] = {}  # context id -> its text sent so far, until done or cancelled
        self._ready: dict[str, Any] | None = None

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return language_name(str(language))

    # Connection

    async def start(self, frame: Any) -> None:
        await super().start(frame)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket is not None and self._receive_task is None:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        """Open the socket and send `start`; a refusal is pushed as an error and leaves no socket."""
        if self._websocket is not None and self._websocket.state is State.OPEN:
            return
        start = start_message(
            voice=str(self._settings.voice),
            language=self._settings.language if isinstance(self._settings.language, str) else None,
            sample_rate=self.sample_rate,
            sampling=self._sampling,
        )
        websocket = None
        try:
            websocket = await self._websocket_connect(
                self._url,
                subprotocols=[Subprotocol(MSGPACK)],
                additional_headers=connect_headers(self._api_key),
            )
            reply = await handshake(websocket, start, READY_TIMEOUT_S)
        except VoicewireError as error:
            if websocket is not None:
                await websocket.close()
            await self.push_error(
                error_msg=f"voicewire refused the session: {error}",
                exception=error,
                category=_category(error, refused_start=True),
            )
            return
        except (OSError, InvalidHandshake, ConnectionClosed, TimeoutError) as exc:
            if websocket is not None:
                await websocket.close()
            await self.push_error(
                error_msg=f"could not reach voicewire at {self._url}: {exc}",
                exception=exc,
                category=ErrorCategory.CONNECTIVITY,
            )
            await self._call_event_handler("on_connection_error", str(exc))
            return
        self._websocket, self._ready = websocket, reply
        logger.debug(f"{self}: session {reply['session_id']} at {reply['sample_rate']} Hz")
        await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self) -> None:
        websocket, self._websocket = self._websocket, None
        self._open.clear()
        if websocket is not None:
            await self.stop_all_metrics()
            await websocket.close()
            await self._call_event_handler("on_disconnected")

    async def _receive_task_handler(self, report_error: Any) -> None:
        """Read the socket until it closes. Pipecat's own handler reconnects at once, a few times,
        then gives the service up; a voicewire server that restarts is back in seconds or
        minutes, so this one ends the turns in flight and leaves the next turn to connect."""
        try:
            await self._receive_messages()
            reason = "the server closed the socket"
        except ConnectionClosed as exc:
            reason = f"the socket closed ({exc})"
        if self._disconnecting:
            return
        logger.warning(f"{self}: {reason}; the next turn connects again")
        cut = list(self._open)
        for context_id in cut:
            await self._end_context(context_id)
        if cut:
            await self.push_error(
                error_msg=f"voicewire went away mid-turn: {reason}", category=ErrorCategory.CONNECTIVITY
            )
        self._receive_task = None  # this task ends here; the next _connect starts another
        await self._disconnect_websocket()

    async def _receive_messages(self) -> None:
        websocket = self._websocket
        assert websocket is not None
        async for frame in websocket:
            await self._on_message(msgpack.unpackb(frame))

    # Turns

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if self._websocket is None or self._websocket.state is not State.OPEN:
            await self._connect()
        websocket = self._websocket
        if websocket is None:  # the refusal or the unreachable server was pushed as an error
            await self._end_context(context_id)
            yield None
            return
        try:
            await websocket.send(msgpack.packb({"type": "text", "context_id": context_id, "text": text}))
        except ConnectionClosed as exc:
            yield ErrorFrame(error=f"voicewire went away: {exc}")
            await self._end_context(context_id)
            yield None
            return
        self._open[context_id] = self._open.get(context_id, "") + text
        await self.start_tts_usage_metrics(text)
        yield None  # the audio comes on the receive task

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is all in: `end` its context (it finishes speaking, then `done`)."""
        context_id = context_id or self.get_active_audio_context_id()
        if context_id in self._open:
            await self._send({"type": "end", "context_id": context_id})

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Barge-in: `cancel` stops the context now; the server sends no more of its audio."""
        await self.stop_all_metrics()
        if self._open.pop(context_id, None) is not None:
            await self._send({"type": "cancel", "context_id": context_id})
        await super().on_audio_context_interrupted(context_id)

    async def _send(self, message: dict[str, Any]) -> None:
        if self._websocket is None:
            return
        try:
            await self._websocket.send(msgpack.packb(message))
        except ConnectionClosed:
            pass  # the receive task ends the open turns

    async def _end_context(self, context_id: str) -> None:
        """Close a turn's audio context (its audio so far still plays)."""
        self._open.pop(context_id, None)
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def _on_message(self, message: dict[str, Any]) -> None:
        kind, context_id = message.get("type"), message.get("context_id")
        if kind == "error":
            error = VoicewireError.from_message(message)
            await self.push_error(
                error_msg=f"voicewire: {error}",
                exception=error,
                category=_category(error, refused_start=False),
            )
            if context_id:
                await self._end_context(context_id)
            return
        if not context_id or not self.audio_context_available(context_id):
            return  # a cancelled turn's last messages
        if kind == "audio":
            await self.stop_ttfb_metrics()
            frame = TTSAudioRawFrame(
                audio=message["data"], sample_rate=self.sample_rate, num_channels=1, context_id=context_id
            )
            await self.append_to_audio_context(context_id, frame)
        elif kind == "words":
            await self._add_words(context_id, message["words"])
        elif kind == "done":
            await self._end_context(context_id)

    async def _add_words(self, context_id: str, words: list[dict[str, Any]]) -> None:
        """Pipecat joins word frames with a space unless a frame says its text carries its own
        spacing: a word that the next runs into (Chinese is spoken character by character) says so."""
        text = self._open.get(context_id, "")
        for word in words:
            end = word["end_char"]
            joined = end < len(text) and not text[end].isspace()
            await self.add_word_timestamps(
                [(word["text"], word["start"] / self.sample_rate)],
                context_id,
                includes_inter_frame_spaces=joined,
            )
