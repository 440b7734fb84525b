"""The engine in this process: `Engine.from_config(...)`, `await engine.voice(...)`,
`engine.open_stream(voice, options) -> StreamHandle`. It satisfies the engine contract
(engine/api.py), as the engine process does.

Two threads do the work: the scheduler's (talker and code predictor, batched over all streams)
and the decoder stage's (codec decoder, batched over streams with due chunks). Callers talk to
their `StreamHandle`s in the event loop they opened them in; audio comes back there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from voicewire.engine.api import EngineInfo, generation_options
from voicewire.engine.config import EngineConfig, GenerationOptions, StreamOptions
from voicewire.engine.errors import InvalidOptions, InvalidVoice
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.prompt import check_voice, supported_languages
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.random_checkpoint import TINY_WARNING
from voicewire.engine.runtime.backend import TalkerBackend
from voicewire.engine.runtime.cpu_threads import use_cpu_threads
from voicewire.engine.runtime.decode_stage import DecoderStage
from voicewire.engine.runtime.gc_pauses import GcPauses
from voicewire.engine.runtime.handle import StreamHandle, caller_loop
from voicewire.engine.runtime.metrics import EngineMetrics
from voicewire.engine.runtime.scheduler import Scheduler
from voicewire.engine.runtime.stream import SAMPLE_RATE, AudioChunk, Stream, StreamListener, StreamResult
from voicewire.engine.runtime.voices import VoiceCache, voice_key
from voicewire.engine.voice import Voice

log = logging.getLogger(__name__)

BACKEND_START_TIMEOUT_S = 900.0  # vLLM starts processes of its own
CLOSE_TIMEOUT_S = 30.0
# The engine's threads give up the GIL at every GPU wait and need it back at once, while the
# server's event loop holds it for socket work; Python's default 5 ms switch interval then
# delays every scheduler round by up to 5 ms per hand-over.
GIL_SWITCH_INTERVAL_S = 0.0005
# What `Engine.tune` may change; `chunks` holds for streams opened after.
LIVE_SETTINGS = ("chunks", "urgent_chunks", "prefill_wait", "first_chunk_alone")


def engine_info(model: Qwen3TTS) -> EngineInfo:
    """The loaded checkpoint, as the contract's callers see it."""
    cfg = model.talker.cfg
    return EngineInfo(
        folder=str(model.folder),
        device=str(model.device),
        variant=model.variant,
        model_size=model.model_size,
        speakers=tuple(sorted(cfg.speakers)),
        speaker_dialects=dict(cfg.speaker_dialects),
        languages=tuple(supported_languages(model.talker)),
        generation_config=dict(model.generation_config),
        speaker_embedding_size=cfg.decoder.hidden_size,
        random_weights=model.is_builtin_tiny,
    )


class Engine:
    """Streams text to speech for many streams at once on one device."""

    def __init__(self, model: Qwen3TTS, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config or EngineConfig()
        self.info = engine_info(model)
        use_cpu_threads(model.device, self.config.cpu_threads)
        # Decided once, here, and held by the model's parts before any graph is captured.
        self.kernels = Kernels.resolve(self.config, model.device)
        model.use_kernels(self.kernels)
        graphs = self.config.cuda_graphs and model.device.type == "cuda"
        self.metrics = EngineMetrics()
        self.decoder_stage = DecoderStage(
            model.decoder,
            self.config.max_streams,
            self.config.chunks,
            graphs,
            self.metrics,
            self.config.urgent_chunks,
            on_stop=lambda error: self.scheduler.streams.stopped(error),
        )
        max_ahead = int(self.config.max_buffered_seconds * SAMPLE_RATE)
        self._ids = itertools.count(1)
        self._slot_watchers: list[Callable[[], None]] = []
        self.voices = VoiceCache()
        self._stop = threading.Event()
        self.scheduler: TalkerBackend
        if self.config.backend == "vllm":
            from voicewire.engine.vllm.scheduler import VllmScheduler

            self.scheduler = VllmScheduler(
                model.parts(), model.folder, self.config, self.decoder_stage, max_ahead
            )
        else:
            self.scheduler = Scheduler(
                model.parts(), self.config, self.decoder_stage, max_ahead, self.metrics
            )
        talker = threading.Thread(
            target=self.scheduler.run,
            args=(self._stop,),
            name=f"voicewire-talker_{self.config.backend}",
            daemon=True,
        )
        self._threads = [
            talker,
            threading.Thread(
                target=self.decoder_stage.run, args=(self._stop,), name="voicewire-decoder", daemon=True
            ),
        ]
        if model.device.type == "cuda":
            sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        self.gc_pauses = GcPauses(self.metrics.gc_pause, self.metrics.gc_full_pause)
        self.gc_pauses.start()
        for thread in self._threads:
            thread.start()
        try:
            self.scheduler.wait_ready(BACKEND_START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_config(cls, config: EngineConfig | str | Path | None = None, **overrides: Any) -> Engine:
        """Load the configured checkpoint and start the engine. `config` is an EngineConfig, a YAML
        profile path (its `engine:` section), or None for the defaults; keywords override settings."""
        if config is None:
            config = EngineConfig.from_dict(overrides)
        elif not isinstance(config, EngineConfig):
            config = EngineConfig.from_yaml(config, **overrides)
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        started = time.monotonic()
        model = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)
        log.info("loaded %s on %s in %.1f s", model.folder, model.device, time.monotonic() - started)
        if model.is_builtin_tiny:
            log.warning(TINY_WARNING)
        return cls(model, config)

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @property
    def healthy(self) -> bool:
        """Both threads are running (false after a bug stopped one, or after close)."""
        return self.scheduler.streams.error is None and all(thread.is_alive() for thread in self._threads)

    @property
    def restarts(self) -> int:
        """Always 0: an engine in this process is not started again."""
        return 0

    @property
    def live_streams(self) -> int:
        return self.scheduler.streams.count

    @property
    def used_slots(self) -> int:
        return self.scheduler.streams.used_slots

    @property
    def registry(self) -> CollectorRegistry:
        """The engine's Prometheus metrics (a server in this process serves them with its own)."""
        return self.metrics.registry

    async def voice(self, **fields: Any) -> Voice:
        """A voice from request fields (speaker, language, instruct, ref_audio, ref_text,
        speaker_embedding) that fits the loaded checkpoint. Reference audio becomes an x-vector
        (and codes) in a worker thread, once per content: the same fields again get the same
        voice back. Raises InvalidVoice."""
        return await self.voices.get(fields, lambda: asyncio.to_thread(self.make_voice, fields))

    def make_voice(self, fields: dict[str, Any]) -> Voice:
        """`voice` in the calling thread, kept by content (the engine process calls it so)."""
        key = voice_key(fields)
        voice = self.voices.lookup(key)
        if voice is None:
            try:
                voice = self.model.voice(**fields)
            except ValueError as exc:
                raise InvalidVoice(str(exc)) from exc
            self.validate_voice(voice)
            self.voices.keep(key, voice)
        return voice

    async def check_voice(self, voice: Voice) -> None:
        """Raise InvalidVoice unless `voice` fits the loaded checkpoint."""
        self.validate_voice(voice)

    def validate_voice(self, voice: Voice) -> None:
        try:
            check_voice(self.model.talker, voice, self.model.variant, self.model.model_size)
        except ValueError as exc:
            raise InvalidVoice(str(exc)) from exc

    def open_stream(self, voice: Voice, options: StreamOptions | None = None) -> StreamHandle:
        """Open a stream; push text to it and iterate it for audio, in the running event loop.
        Raises InvalidOptions or EngineFull; a voice that does not fit fails the stream (its
        iteration raises InvalidVoice), as with the engine in its own process."""
        caller_loop()  # raises outside one
        options = options or StreamOptions()
        generation_options(self.info, options)  # options first, as the engine process checks them
        try:
            self.validate_voice(voice)
        except InvalidVoice as exc:
            refused = StreamHandle(next(self._ids), voice, options, _REFUSED)
            refused.finish(StreamResult("error", 0, 0, 0, -1, exc))
            return refused
        bridge = _ToHandle(self._slot_freed)
        stream, generation = self._new_stream(voice, options, bridge)
        bridge.handle = StreamHandle(stream.id, voice, options, stream)  # before any chunk
        self._submit(stream, generation)
        return bridge.handle

    def admit(self, voice: Voice, options: StreamOptions, listener: StreamListener) -> Stream:
        """Give a stream a slot; its chunks and result go to `listener`, in the engine's threads
        (the engine process serves its servers' streams this way). Raises as `open_stream`."""
        stream, generation = self._new_stream(voice, options, listener)
        self._submit(stream, generation)
        return stream

    def _new_stream(
        self, voice: Voice, options: StreamOptions, listener: StreamListener
    ) -> tuple[Stream, GenerationOptions]:
        if (error := self.scheduler.streams.error) is not None:
            raise RuntimeError("the engine's scheduler or decoder stopped") from error
        self.validate_voice(voice)
        generation = generation_options(self.info, options)
        return Stream(next(self._ids), voice, options, self.model.tokenizer, self._wake, listener), generation

    def _submit(self, stream: Stream, generation: GenerationOptions) -> None:
        lookahead = stream.options.lookahead_tokens or self.config.lookahead_tokens
        self.scheduler.submit(stream, generation, lookahead)
        self._wake()

    def watch_slots(self, callback: Callable[[], None]) -> None:
        """Call `callback` (in an engine thread) as each stream opened with `open_stream` finishes."""
        self._slot_watchers.append(callback)

    def _slot_freed(self) -> None:
        for callback in self._slot_watchers:
            callback()

    def tune(self, **settings: Any) -> None:
        """Change the settings that the engine's threads read afresh each round (`LIVE_SETTINGS`),
        e.g. `tune(urgent_chunks=UrgentChunks(in_hand_s=1.0))`; raises InvalidOptions for others
        or for values the config refuses. Meant for A/B runs on one engine between runs."""
        unknown = sorted(set(settings) - set(LIVE_SETTINGS))
        if unknown:
            raise InvalidOptions(
                f"{', '.join(unknown)} cannot change on a running engine; these can: {', '.join(LIVE_SETTINGS)}"
            )
        self.config = dataclasses.replace(self.config, **settings)
        self.decoder_stage.chunks = self.config.chunks
        self.decoder_stage.urgent = self.config.urgent_chunks
        self.scheduler.config = self.config

    def _wake(self) -> None:
        self.scheduler.wake()

    def close(self) -> None:
        """Stop both threads. Open streams get no more audio. On the vllm backend this includes
        stopping vLLM's engine processes (a few seconds), which would otherwise outlive ours."""
        self._stop.set()
        self._wake()
        for thread in self._threads:
            thread.join(timeout=CLOSE_TIMEOUT_S)
        self.gc_pauses.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Refused:
    """The control of a stream refused at its opening: it has nothing to tell the engine."""

    def push_text(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def end(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def acknowledge(self, consumed_samples: int) -> None:
        pass


_REFUSED = _Refused()


class _ToHandle:
    """A stream's listener in this process: its chunks and result go to its handle, in the
    handle's event loop, in the order they came. A stream that finished has freed its slot, or
    is about to (the scheduler frees it just after handing the stream's end to the decoder), so
    `freed` is told; a waiter that finds no slot yet looks again shortly (server/admission.py)."""

    handle: StreamHandle

    def __init__(self, freed: Callable[[], None]) -> None:
        self._freed = freed

    def chunk(self, stream: Stream, chunk: AudioChunk) -> None:
        self._call(stream, self.handle.deliver, chunk)

    def finished(self, stream: Stream, result: StreamResult) -> None:
        self._call(stream, self.handle.finish, result)
        self._freed()

    def _call(self, stream: Stream, fn: Callable[[Any], None], arg: object) -> None:
        try:
            self.handle.loop.call_soon_threadsafe(fn, arg)
        except RuntimeError:  # the caller's loop is closed: nobody is listening any more
            stream.abort()
