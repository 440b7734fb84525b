"""One talker sequence under vLLM: what the front end sends, and what the worker keeps per request.

A talker sequence (one segment of a stream) is one vLLM streaming-input request. Its tokens are
placeholders: the worker builds each position's input row from the request's own data.
- Positions [0, T) are the prompt rows (`Rows`, embedded like the torch backend does).
- Position T + i feeds frame i back: the sum of its 16 code embeddings plus the text-track row of
  `track[i]`, or tts_pad once the track is complete and spent.
Frame i is drawn by the step that computes position T + i - 1 (the prompt's last row for frame 0).
Every position's row depends only on this data and on the frames drawn so far, so a request
preempted and recomputed from position 0 gets the same rows, and the same frames.

The first chunk's `SamplingParams.extra_args[EXTRA_KEY]` carries a `SequenceSpec`; each later chunk
carries a `TrackChunk` with the text ids that arrived since.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from voicewire.engine.config import GenerationOptions, SamplingParams
from voicewire.engine.model.prompt import Rows, embed_rows
from voicewire.engine.model.sampling import Draw, RowSampling
from voicewire.engine.model.talker import Talker
from voicewire.engine.runtime.frame_step import MIN_FRAMES, banned_ids, choose_code0

EXTRA_KEY = "voicewire"
# What one sampled position returns (the pooler output): [frame index, kind, 16 codes].
FRAME, EOS, NON_FINITE = 0, 1, 2
OUTPUT_WIDTH = 18


@dataclass
class SequenceSpec:
    """The first chunk of a talker sequence: its prompt, the text track known so far, and how to draw."""

    text: list[int]  # prompt rows (prompt.Rows)
    codec: list[int]
    track: list[int]  # text ids fed with frames 0.. (as far as known)
    complete: bool  # the track ends with tts_eos: tts_pad follows
    tts_pad: int
    seed: int
    round_base: int  # draw rounds the stream used before this sequence (noise counters)
    talker: list[float]  # do_sample, temperature, top_k, top_p
    predictor: list[float]
    repetition_penalty: float
    suppress_eos: bool
    xvector: list[float] | None = None
    ref_codes: list[list[int]] | None = None
    chunk: int = 0

    @classmethod
    def build(
        cls,
        rows: Rows,
        track: list[int],
        complete: bool,
        tts_pad: int,
        options: GenerationOptions,
        seed: int,
        round_base: int,
        xvector: Tensor | None,
        ref_codes: Tensor | None,
    ) -> SequenceSpec:
        def params(p: SamplingParams) -> list[float]:
            return [float(p.do_sample), p.temperature, float(p.top_k), p.top_p]

        return cls(
            text=list(rows.text),
            codec=list(rows.codec),
            track=list(track),
            complete=complete,
            tts_pad=tts_pad,
            seed=seed,
            round_base=round_base,
            talker=params(options.talker),
            predictor=params(options.predictor),
            repetition_penalty=options.repetition_penalty,
            suppress_eos=options.suppress_eos,
            xvector=None if xvector is None else [float(v) for v in xvector.float().tolist()],
            ref_codes=None if ref_codes is None else ref_codes.long().tolist(),
        )

    def to_extra(self) -> dict[str, Any]:
        return {EXTRA_KEY: asdict(self)}


@dataclass
class TrackChunk:
    """A later chunk: text ids that arrived since the last chunk, and whether the track is now complete."""

    chunk: int
    track: list[int]
    complete: bool

    def to_extra(self) -> dict[str, Any]:
        return {EXTRA_KEY: asdict(self)}


def _sampling_params(values: list[float]) -> SamplingParams:
    do_sample, temperature, top_k, top_p = values
    return SamplingParams(bool(do_sample), temperature, int(top_k), top_p)


def _row_sampling(params: list[SamplingParams], device: torch.device) -> RowSampling:
    rows = RowSampling.allocate(len(params), device)
    for i, p in enumerate(params):
        rows.set(i, p)
    return rows


@dataclass
class SequenceState:
    """The worker's record of one request: its spec, the text track so far and every frame drawn."""

    spec: SequenceSpec
    track: list[int]
    complete: bool
    chunks: int = 1  # chunks applied
    frames: list[list[int]] = field(default_factory=list)
    ended: bool = False  # EOS or non-finite logits: later positions are never read
    prompt_rows: Tensor | None = None  # [T, H], embedded on first use
    seen: Tensor | None = None  # [V] bool: the codes 0 drawn so far (repetition penalty), on first draw

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None) -> SequenceState:
        data = (extra or {}).get(EXTRA_KEY)
        if not isinstance(data, dict) or "text" not in data:
            raise ValueError("a voicewire talker request needs a SequenceSpec in extra_args")
        spec = SequenceSpec(**data)
        return cls(spec, list(spec.track), spec.complete)

    @property
    def prompt_length(self) -> int:
        return len(self.spec.text)

    def apply(self, extra: dict[str, Any] | None) -> None:
        """Take a later chunk's text ids (a no-op for a chunk already applied)."""
        data = (extra or {}).get(EXTRA_KEY)
        if not isinstance(data, dict) or data.get("chunk", 0) < self.chunks:
            return
        if data["chunk"] != self.chunks:
            raise ValueError(f"chunk {data['chunk']} arrived after chunk {self.chunks - 1}")
        if self.complete:
            raise ValueError("text arrived after the track was complete")
        self.track.extend(data["track"])
        self.complete = bool(data["complete"])
        self.chunks += 1

    def feed_id(self, frame: int) -> int:
        if frame < len(self.track):
            return self.track[frame]
        if not self.complete:
            raise ValueError(f"frame {frame} is fed before its text id arrived ({len(self.track)} known)")
        return self.spec.tts_pad


def embed_positions(talker: Talker, rows: list[tuple[SequenceState, int]]) -> Tensor:
    """Input rows [N, H] for (sequence, position) pairs, in order."""
    device = talker.codec_head.weight.device
    out = torch.empty(
        len(rows), talker.cfg.decoder.hidden_size, device=device, dtype=talker.codec_head.weight.dtype
    )
    frame_at, frame_codes, frame_text = [], [], []
    for i, (state, position) in enumerate(rows):
        if position < state.prompt_length:
            if state.prompt_rows is None:
                spec = state.spec
                xvector = None if spec.xvector is None else torch.tensor(spec.xvector)
                ref = None if spec.ref_codes is None else torch.tensor(spec.ref_codes, dtype=torch.long)
                state.prompt_rows = embed_rows(talker, Rows(spec.text, spec.codec), xvector, ref)
            out[i] = state.prompt_rows[position]
            continue
        frame = position - state.prompt_length
        if frame >= len(state.frames):
            raise ValueError(f"position {position} feeds frame {frame}, but {len(state.frames)} were drawn")
        frame_at.append(i)
        frame_codes.append(state.frames[frame])
        frame_text.append(state.feed_id(frame))
    if frame_at:
        codes = torch.tensor(frame_codes, dtype=torch.long, device=device)
        text = torch.tensor(frame_text, dtype=torch.long, device=device)
        out[torch.tensor(frame_at, device=device)] = talker.embed_frame(codes) + talker.embed_text(text)
    return out


class FrameDrawer:
    """Code 0 from the talker's logits, then codes 1..15 from the code predictor, for a batch of
    sequences at their next frame: the same functions and noise counters as the torch backend."""

    def __init__(self, talker: Talker) -> None:
        self.talker = talker
        self.device = talker.codec_head.weight.device
        self.banned, self.eos_only = banned_ids(talker.cfg, self.device)

    def draw(self, states: list[SequenceState], logits: Tensor, hidden: Tensor) -> Tensor:
        """logits [n, V], hidden [n, H] at each sequence's last position -> outputs [n, 18]
        ([frame index, kind, 16 codes]); drawn frames are appended to their sequence."""
        n = len(states)
        cfg = self.talker.cfg
        index = torch.tensor([len(s.frames) for s in states], dtype=torch.long, device=self.device)
        for state in states:
            if state.seen is None:
                state.seen = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=self.device)
        seen = torch.stack([s.seen for s in states])  # type: ignore[misc]
        penalty = torch.tensor([s.spec.repetition_penalty for s in states], device=self.device)
        suppress = torch.tensor([s.spec.suppress_eos for s in states], device=self.device)
        no_eos = (suppress | (index < MIN_FRAMES))[:, None] & self.eos_only
        seed = torch.tensor([s.spec.seed for s in states], dtype=torch.long, device=self.device)
        rounds = (
            torch.tensor([s.spec.round_base for s in states], dtype=torch.long, device=self.device) + index
        )
        talker = [_sampling_params(s.spec.talker) for s in states]
        predictor = [_sampling_params(s.spec.predictor) for s in states]
        talker_params = _row_sampling(talker, self.device)
        predictor_params = _row_sampling(predictor, self.device)
        draw = Draw.needed(talker + predictor)
        finite = torch.isfinite(logits).all(dim=-1)
        code0 = choose_code0(
            logits, seen, penalty, self.banned, no_eos, talker_params, seed, rounds << 4, draw
        )
        predictor = self.talker.code_predictor
        residual = predictor.predict(
            hidden,
            self.talker.embed_codec(code0),
            predictor.model.new_cache(n, predictor.cache_length),
            predictor_params,
            seed,
            (rounds + 1) << 4,
            draw,
        )
        out = torch.zeros(n, OUTPUT_WIDTH, dtype=torch.long, device=self.device)
        out[:, 0] = index
        out[:, 2] = code0
        out[:, 3:] = residual
        eos = code0 == cfg.codec_eos_id
        out[:, 1] = torch.where(~finite, NON_FINITE, torch.where(eos, EOS, FRAME))
        for state, row in zip(states, out.tolist(), strict=True):
            if row[1] == FRAME:
                state.frames.append(row[2:])
                state.seen[row[2]] = True  # type: ignore[index]
            else:
                state.ended = True
        return out
