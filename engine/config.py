"""Engine configuration (one YAML profile per deployment, in configs/) and per-stream options."""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from voicewire.engine.errors import InvalidOptions
from voicewire.engine.runtime.segments import Segment, SegmentPolicy

FRAME_RATE = 12.5  # codec frames a second: 1920 samples at 24 kHz
# How a stream's text enters the talker's prompt (engine/model/prompt.py lays out each).
LAYOUTS = ("non_streaming", "dual_track")


@dataclass(frozen=True)
class SamplingParams:
    """One stream's sampling settings."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class GenerationOptions:
    """One stream's decoding settings."""

    talker: SamplingParams = field(default_factory=SamplingParams)
    predictor: SamplingParams = field(default_factory=SamplingParams)
    repetition_penalty: float = 1.05  # talker codebook 0 only
    suppress_eos: bool = False  # force frames until a cap (benchmarks, comparisons)

    @classmethod
    def from_generation_config(
        cls,
        gen: dict,
        greedy: bool = False,
        suppress_eos: bool = False,
        talker: SamplingParams | None = None,
        predictor: SamplingParams | None = None,
        repetition_penalty: float | None = None,
    ) -> GenerationOptions:
        """The checkpoint's generation_config.json defaults, with the given overrides."""
        talker = talker or SamplingParams(
            do_sample=gen.get("do_sample", True),
            temperature=gen.get("temperature", 0.9),
            top_k=gen.get("top_k", 50),
            top_p=gen.get("top_p", 1.0),
        )
        predictor = predictor or SamplingParams(
            do_sample=gen.get("subtalker_dosample", True),
            temperature=gen.get("subtalker_temperature", 0.9),
            top_k=gen.get("subtalker_top_k", 50),
            top_p=gen.get("subtalker_top_p", 1.0),
        )
        if greedy:
            talker = SamplingParams(False, talker.temperature, talker.top_k, talker.top_p)
            predictor = SamplingParams(False, predictor.temperature, predictor.top_k, predictor.top_p)
        penalty = gen.get("repetition_penalty", 1.05) if repetition_penalty is None else repetition_penalty
        if penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
        return cls(talker, predictor, float(penalty), suppress_eos)


@dataclass(frozen=True)
class ChunkSchedule:
    """How many frames each audio chunk holds: a small first chunk for latency, then larger ones."""

    first_frames: int = 1
    frames: tuple[int, ...] = (2, 4, 8)  # the chunks after the first; the last size repeats

    def __post_init__(self) -> None:
        sizes = (self.first_frames, *self.frames)
        if not self.frames or any(not isinstance(n, int) or n < 1 for n in sizes):
            raise InvalidOptions(f"chunk sizes must be whole numbers >= 1, got {list(sizes)}")

    def size(self, index: int) -> int:
        """Frames in chunk `index` (0 = the first)."""
        if index == 0:
            return self.first_frames
        return self.frames[min(index - 1, len(self.frames) - 1)]


@dataclass(frozen=True)
class UrgentChunks:
    """Which decoder chunks a round takes first, and how many of the rest. A round decodes the chunks
    of listeners with less than `in_hand_s` of audio in hand (new streams' above all) first; off
    while `in_hand_s` is 0. With `bulk_rows`, it then takes at most that many of the other chunks
    (those with the least in hand first) and leaves the rest due for the rounds after, so a round
    is short and the urgent chunks that arrive during it do not wait long for the next. Among the
    others, the last chunks of streams whose talker has ended go first: a session ends with them,
    and its client (a turn-taking agent, or the next request) waits for that end. With `urgent_rows`,
    a round takes at most that many urgent chunks, those with the least in hand first, and none of
    the others: when a burst of new streams makes most chunks urgent, the listeners nearest to
    running dry get theirs after a short round instead of at the end of one long one. With
    `join_waiting`, the chunks of listeners waiting now (a new stream's first, or one run dry) that
    come due while a round runs join its next pass, instead of waiting for the round's end, in the
    passes that start within `join_for_s` of its start: a round that kept taking them ran on while
    the next chunks of the streams it held came due (session 58: rounds of 175-195 ms p95 at 256
    busy streams, and 9 streams gapped 0.24 s into a session). Within 0.1 s no stream gapped in
    three services' runs at 256 x 10, and first audio p95 fell (session 59, docs/engine.md). With
    `shared_passes`, the urgent chunks and the others ride in the same passes, one per frame count,
    instead of the urgent ones' passes first and then the others': a round of both then costs one
    pass per frame count, not up to two (at 256 busy streams a pass held 22.5 rows p50, and the
    decoder took 38.5 us a frame against 16.3 in a 256 x 8 pass; session 59). Urgent chunks of
    one frame still come out in the first pass; those of 8 wait for the others' rows in theirs.
    With `busy_streams`, while the decoder holds more streams than that, a round takes at most
    `busy_bulk_rows` of the others instead of `bulk_rows`: a burst of new streams (512 sessions
    opened at once) then gets short rounds, and a steady load the long ones that decode more rows a
    pass (session 66: `bulk_rows` 32 cut the sessions gapped at 512 x 5 from 603-872 to 26-188, and
    raised them at 256 x 10 from 1-7 to 21-95). Under that cap the sessions end later (a final
    chunk 1.0-1.2 s after the stream's last frame on average, against 0.2-0.3 without); letting
    ended streams' chunks ride beyond the caps brought that to 0.4 s but gapped 687-867 sessions
    at 512 x 5 against 93-319 (session 68), so they stay first among the others, under the cap.
    With `join_final` (and `join_waiting`), while no more than `busy_streams` are open, the last
    chunk of a stream whose talker ended during a round joins that round's next pass as a waiting
    listener's does (or, its frames all decoded already, its end goes out between two passes): its
    session's `done`, and in a closed loop the next session, then need not wait for the next round
    (at 256 x 10 a final chunk came 100 ms after its stream's last frame on average, session 72).
    On trial."""

    in_hand_s: float = 0.0
    bulk_rows: int = 0  # 0: a round takes every due chunk
    urgent_rows: int = 0  # 0: a round takes every urgent chunk
    join_waiting: bool = False
    join_for_s: float = 0.1  # with join_waiting: how long into a round its passes take joiners
    join_final: bool = False  # on trial, with join_waiting: ended streams' last chunks join too
    shared_passes: bool = False  # on trial: urgent and other chunks in one round's same passes
    busy_streams: int = 0  # 0: bulk_rows at any load
    busy_bulk_rows: int = 0  # with busy_streams: the cap on the others while more streams are open

    def __post_init__(self) -> None:
        counts = (self.bulk_rows, self.urgent_rows, self.busy_streams, self.busy_bulk_rows)
        if min(self.in_hand_s, self.join_for_s, *counts) < 0:
            raise InvalidOptions(
                "urgent_chunks needs in_hand_s, bulk_rows, urgent_rows, join_for_s, busy_streams and "
                f"busy_bulk_rows >= 0, got {self}"
            )
        if self.join_final and not self.join_waiting:
            raise InvalidOptions(
                "urgent_chunks.join_final joins the round as join_waiting does: turn that on too"
            )
        if (self.busy_streams > 0) != (self.busy_bulk_rows > 0):
            # busy_bulk_rows 0 under load would mean every due chunk, the opposite of a busy cap.
            raise InvalidOptions(
                "urgent_chunks.busy_streams and busy_bulk_rows go together (both 0: off), got "
                f"{self.busy_streams} and {self.busy_bulk_rows}"
            )


@dataclass(frozen=True)
class PrefillWait:
    """While the talker steps, sequences ready to start may wait for others, so that a round starts
    more of them in one prefill: each round costs the host a few ms whatever it holds, and arrivals
    spread over time otherwise make many rounds of one or two. Off while `max_s` is 0."""

    max_s: float = 0.0  # the longest a ready sequence waits; an idle talker never waits
    prompts: int = 8  # ready sequences that start a round at once

    def __post_init__(self) -> None:
        if self.max_s < 0 or self.prompts < 1:
            raise InvalidOptions(f"prefill_wait needs max_s >= 0 and prompts >= 1, got {self}")


@dataclass(frozen=True)
class FirstChunkAlone:
    """While the talker steps at most `rows` streams (0: off), a step that made a new stream's first
    frame is read before the next is launched, and the next waits, on the GPU, for the decoder's
    pass of that stream's first chunk: the pass then runs alone instead of beside a step (session
    60, one H200: beside the one-stream steps a pass took 2.5 ms p50, alone about 0.95 ms; first
    audio at c=1 in the service went from 13.41-13.94 to 11.91-12.09 ms p50). The talker waits at
    most `wait_s` on the host for the decoder to queue that pass. Each new stream costs the streams
    stepping beside it that pass's time once, so it is for light loads, where first audio is what a
    caller hears most."""

    rows: int = 0
    wait_s: float = 0.005

    def __post_init__(self) -> None:
        if self.rows < 0 or self.wait_s < 0:
            raise InvalidOptions(f"first_chunk_alone needs rows >= 0 and wait_s >= 0, got {self}")


@dataclass(frozen=True)
class SpeechGuard:
    """How long a talker sequence may go on once all its text is in: the frames that feed the text,
    then `after_text_s` plus `per_token_s` for each of its text tokens. A model that never says
    end-of-speech (a random checkpoint; a real one, now and then) would otherwise speak until the
    KV bound, over a minute of noise. Real speech takes about 0.2-0.4 s a token (English words are
    1-2 tokens, Chinese characters about one), so the defaults cut only what is not speech. A
    stream with `max_frames` or `suppress_eos` (benchmarks) is not guarded."""

    after_text_s: float = 3.0
    per_token_s: float = 0.5

    def __post_init__(self) -> None:
        if self.after_text_s <= 0 or self.per_token_s < 0:
            raise InvalidOptions(f"speech_guard needs after_text_s > 0 and per_token_s >= 0, got {self}")

    def frames(self, segment: Segment) -> int | None:
        """The frames a started segment may reach, once its text is complete (None before)."""
        if not segment.complete or segment.start < 0:
            return None
        text_frames = max(0, len(segment.seq) - segment.start)  # frames that still feed it text
        return text_frames + math.ceil((self.after_text_s + self.per_token_s * segment.body) * FRAME_RATE)


@dataclass(frozen=True)
class StreamOptions:
    """Per-stream settings; None takes the checkpoint's generation_config.json or the engine's default."""

    layout: str = "dual_track"  # non_streaming waits for flush/end and puts all text in the prompt
    greedy: bool = False
    seed: int | None = None
    talker: SamplingParams | None = None
    predictor: SamplingParams | None = None
    repetition_penalty: float | None = None
    max_frames: int | None = None  # cap on the whole stream's frames
    suppress_eos: bool = False  # no EOS: segments run to their frame cap (benchmarks)
    lookahead_tokens: int | None = None
    chunks: ChunkSchedule | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise InvalidOptions(f"unknown layout {self.layout!r}; allowed: {', '.join(LAYOUTS)}")
        if self.greedy and self.seed is not None:
            raise InvalidOptions("greedy decoding takes no seed")
        if self.max_frames is not None and self.max_frames < 1:
            raise InvalidOptions(f"max_frames must be >= 1, got {self.max_frames}")
        if self.lookahead_tokens is not None and self.lookahead_tokens < 1:
            raise InvalidOptions(f"lookahead_tokens must be >= 1, got {self.lookahead_tokens}")


BACKENDS = ("torch", "vllm")


@dataclass(frozen=True)
class VllmSettings:
    """The vllm backend's settings (`backend: vllm`); see docs/deployment.md."""

    max_num_seqs: int | None = None  # talker sequences vLLM batches; None: max_streams
    kv_cache_gib: float | None = None  # KV cache size; None: vLLM sizes it from gpu_memory_utilization
    gpu_memory_utilization: float = 0.6  # share of the GPU for vLLM (the codec decoder needs the rest)
    enforce_eager: bool = False  # no CUDA graphs (always eager on CPU)
    block_size: int | None = None  # KV block size; None: vLLM's default (CPU needs a multiple of 32)
    num_blocks: int | None = None  # force the KV cache to this many blocks (tests force preemption)
    data_parallel_size: int = 1  # talker replicas inside this process's vLLM (one GPU each)
    waiting_timeout_s: float = 30.0  # a stream waiting for text this long gives up its KV cache

    def __post_init__(self) -> None:
        if self.waiting_timeout_s <= 0:
            raise InvalidOptions(f"vllm.waiting_timeout_s must be > 0, got {self.waiting_timeout_s}")
        if self.data_parallel_size < 1:
            raise InvalidOptions(f"vllm.data_parallel_size must be >= 1, got {self.data_parallel_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InvalidOptions(
                f"vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )


@dataclass(frozen=True)
class EngineConfig:
    model: str = "tiny"  # checkpoint folder, Hugging Face repo id, or 'tiny'
    backend: str = "torch"  # who runs the talker: "torch" (in process) or "vllm"
    device: str = "cpu"
    dtype: str = "float32"
    cpu_threads: int = 1  # on CPU, the threads torch splits each op over (engine/runtime/cpu_threads.py)
    max_streams: int = 8  # stream slots: KV caches and decoder states are allocated for this many
    kv_length: int = 1024  # talker KV positions per slot: voice prefix + one segment's frames
    lookahead_tokens: int = 3  # text tokens a segment waits for before its first frame
    max_prefills_per_step: int = 4  # new talker sequences started between two batched steps
    max_buffered_seconds: float = 30.0  # audio a stream may run ahead of its reader
    cuda_graphs: bool = True  # on CUDA, each batch bucket's frame step replays one captured graph
    fuse_kernels: bool = True  # on CUDA, torch.compile the layers' elementwise pieces (engine.pointwise)
    fused_draw: bool = True  # on CUDA, each token draw of a frame as one Triton kernel (engine.fused_draw)
    # On CUDA, the codec decoder's dense convs as Triton implicit GEMMs with their bias and residual
    # adds (engine.fused_conv), in place of cuDNN's convs and separate adds.
    fused_conv: bool = True
    # On CUDA, the codec decoder's window attention (the carried window's gather, the new keys'
    # `cat`, SDPA and the window's write-back) as one Triton kernel per layer (engine.decoder_window).
    fused_window: bool = True
    # With fused_conv, each residual unit of the decoder's narrowest block (96 channels) as one
    # kernel (engine.fused_conv.unit): its dilated conv, the activation and the 1x1 conv with the
    # residual. A graphed 256 x 8 decoder pass on an H200 went 35.2 -> 33.3 ms (docs/engine.md).
    fused_unit: bool = True
    segments: SegmentPolicy = field(default_factory=SegmentPolicy)
    chunks: ChunkSchedule = field(default_factory=ChunkSchedule)
    urgent_chunks: UrgentChunks = field(default_factory=UrgentChunks)
    prefill_wait: PrefillWait = field(default_factory=PrefillWait)
    first_chunk_alone: FirstChunkAlone = field(default_factory=FirstChunkAlone)
    speech_guard: SpeechGuard = field(default_factory=SpeechGuard)
    vllm: VllmSettings = field(default_factory=VllmSettings)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InvalidOptions(f"unknown backend {self.backend!r}; allowed: {', '.join(BACKENDS)}")
        if self.max_streams < 1:
            raise InvalidOptions(f"max_streams must be >= 1, got {self.max_streams}")
        if self.cpu_threads < 1:
            raise InvalidOptions(f"cpu_threads must be >= 1, got {self.cpu_threads}")
        if self.kv_length < 64:
            raise InvalidOptions(f"kv_length must be >= 64, got {self.kv_length}")
        if self.lookahead_tokens < 1 or self.max_prefills_per_step < 1:
            raise InvalidOptions("lookahead_tokens and max_prefills_per_step must be >= 1")
        if self.max_buffered_seconds <= 0:
            raise InvalidOptions(f"max_buffered_seconds must be > 0, got {self.max_buffered_seconds}")
        if self.backend == "vllm" and self.prefill_wait.max_s > 0:
            raise InvalidOptions("prefill_wait is the torch scheduler's; vLLM schedules its own prefills")
        if self.backend == "vllm" and self.first_chunk_alone.rows > 0:
            raise InvalidOptions("first_chunk_alone is the torch scheduler's; vLLM launches its own steps")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        values = typed_settings(cls, data, "engine", "engine setting ")
        for name, section in _SECTIONS.items():
            if name in values:
                values[name] = _section(section, name, values[name])
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> EngineConfig:
        """The `engine:` section of a profile in configs/, with keyword overrides."""
        with open(path, encoding="utf-8") as f:
            profile = yaml.safe_load(f) or {}
        if not isinstance(profile, dict) or not isinstance(profile.get("engine", {}), dict):
            raise InvalidOptions(f"{path}: expected a mapping with an 'engine:' section")
        data = dict(profile.get("engine", {}))
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(data)


# The settings that are sections of their own (a mapping in the profile), and their dataclasses.
_SECTIONS: dict[str, type] = {
    "segments": SegmentPolicy,
    "chunks": ChunkSchedule,
    "vllm": VllmSettings,
    "urgent_chunks": UrgentChunks,
    "prefill_wait": PrefillWait,
    "first_chunk_alone": FirstChunkAlone,
    "speech_guard": SpeechGuard,
}


def _section(cls: type, name: str, data: Any) -> Any:
    if not isinstance(data, dict):
        raise InvalidOptions(f"engine setting {name!r} must be a mapping")
    if cls is ChunkSchedule and isinstance(data.get("frames"), list):
        data = {**data, "frames": tuple(data["frames"])}  # a YAML list; the schedule is frozen
    return cls(**typed_settings(cls, data, name, f"engine setting {name}."))


def typed_settings(cls: type, data: dict[str, Any], known_as: str, where: str) -> dict[str, Any]:
    """`data`, settings of the dataclass `cls` (`known_as` in the message for one it has no field
    for), each checked against its field's type, strictly: no "8" or 8.0 for a whole number, no true
    for a number (a whole number for a float becomes that float). A profile's slip is then one clear
    line at load naming the setting (`where` + its name), not a TypeError deep in the engine or a
    server with 8.0 stream slots. Fields that are dataclasses (sections) are their own reader's. The
    server's settings are read with it too."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidOptions(
            f"unknown {known_as} settings: {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
        )
    hints = typing.get_type_hints(cls)
    checked = dict(data)
    for name, value in data.items():
        if is_dataclass(hints[name]):
            continue
        try:
            checked[name] = _adapter(hints[name]).validate_python(value, strict=True)
        except ValidationError as exc:
            wanted = exc.errors()[0]["msg"].removeprefix("Input ")
            raise InvalidOptions(f"{where}{name} {wanted}, got {value!r}") from None
    return checked


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)
