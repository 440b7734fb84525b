"""Offline generation: prompts in, frames of 16 codes out, for one or more streams together.

The per-frame work is `FrameStepper.step`: fixed shapes, tensors in and out. The driver loop
here stops when every stream has ended; the streaming scheduler replaces it in a later stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from voicewire.engine.prompt import Prompt
from voicewire.engine.sampling import SamplingParams, apply_repetition_penalty, mask_ids, sample
from voicewire.engine.talker import Talker

MIN_FRAMES = 2  # the official generate never ends before two frames


@dataclass(frozen=True)
class GenerationOptions:
    talker: SamplingParams = field(default_factory=SamplingParams)
    predictor: SamplingParams = field(default_factory=SamplingParams)
    repetition_penalty: float = 1.05  # talker codebook 0 only
    max_frames: int = 2048
    suppress_eos: bool = False  # force max_frames frames (benchmarks, comparisons)

    @classmethod
    def from_generation_config(
        cls, gen: dict, greedy: bool = False, max_frames: int | None = None, suppress_eos: bool = False
    ) -> GenerationOptions:
        talker = SamplingParams(
            do_sample=not greedy and gen.get("do_sample", True),
            temperature=gen.get("temperature", 0.9),
            top_k=gen.get("top_k", 50),
            top_p=gen.get("top_p", 1.0),
        )
        predictor = SamplingParams(
            do_sample=not greedy and gen.get("subtalker_dosample", True),
            temperature=gen.get("subtalker_temperature", 0.9),
            top_k=gen.get("subtalker_top_k", 50),
            top_p=gen.get("subtalker_top_p", 1.0),
        )
        if max_frames is not None and max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        return cls(
            talker=talker,
            predictor=predictor,
            repetition_penalty=gen.get("repetition_penalty", 1.05),
            max_frames=max_frames if max_frames is not None else gen.get("max_new_tokens", 8192) - 1,
            suppress_eos=suppress_eos,
        )


class FrameStepper:
    """Batched talker + code predictor state for B streams (rows), allocated once."""

    def __init__(self, talker: Talker, batch: int, max_len: int, options: GenerationOptions) -> None:
        cfg = talker.cfg
        self.talker = talker
        self.options = options
        device = talker.codec_head.weight.device
        self.cache = talker.model.new_cache(batch, max_len)
        self.predictor_cache = talker.code_predictor.model.new_cache(
            batch, talker.code_predictor.cache_length
        )
        self.seen = torch.zeros(batch, cfg.vocab_size, dtype=torch.bool, device=device)
        # Control ids (top 1024 of the codec vocab) never start a frame, except EOS when allowed.
        self.banned = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=device)
        self.banned[cfg.vocab_size - 1024 :] = True
        self.banned[cfg.codec_eos_id] = options.suppress_eos
        self.eos_only = torch.zeros_like(self.banned)
        self.eos_only[cfg.codec_eos_id] = True

    def first_code(self, logits: Tensor, frames_done: Tensor, generators: list) -> Tensor:
        """Codebook-0 logits [B, V] -> code 0 [B] with penalty, suppression and minimum length."""
        logits = apply_repetition_penalty(logits, self.seen, self.options.repetition_penalty)
        logits = mask_ids(logits, self.banned)
        logits = mask_ids(logits, self.eos_only & (frames_done < MIN_FRAMES)[:, None])
        code0 = sample(logits, self.options.talker, generators)
        self.seen.scatter_(1, code0[:, None], True)
        return code0

    def step(
        self, hidden: Tensor, code0: Tensor, text_rows: Tensor, positions: Tensor, generators: list
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One frame for every row: (last hidden [B,H], code 0 [B], text row [B,H], positions [B])
        -> (frame codes [B, 16], new hidden [B, H], codebook-0 logits [B, V])."""
        talker = self.talker
        residual = talker.code_predictor.predict(
            hidden, talker.embed_codec(code0), self.predictor_cache, self.options.predictor, generators
        )
        frame = torch.cat((code0[:, None], residual), dim=1)
        x = (talker.embed_frame(frame) + text_rows)[:, None]
        new_hidden, logits = talker(x, positions[:, None], self.cache)
        return frame, new_hidden[:, -1], logits[:, -1]


@torch.inference_mode()
def generate_codes(
    talker: Talker,
    prompts: list[Prompt],
    options: GenerationOptions,
    seeds: list[int | None] | None = None,
    tts_pad_id: int = 151671,
) -> list[Tensor]:
    """Generate each prompt's frames; returns per stream a LongTensor [frames, 16] without EOS."""
    batch = len(prompts)
    device = talker.codec_head.weight.device
    seeds = seeds or [None] * batch
    generators = [torch.Generator(device=device).manual_seed(s) if s is not None else None for s in seeds]
    if options.talker.do_sample or options.predictor.do_sample:
        generators = [g or torch.Generator(device=device).manual_seed(torch.seed()) for g in generators]
    lengths = [p.prefill.shape[0] for p in prompts]
    stepper = FrameStepper(talker, batch, max(lengths) + options.max_frames, options)

    # Prefill each row alone (different lengths), then step all rows together.
    hidden = torch.empty(batch, talker.cfg.decoder.hidden_size, device=device, dtype=prompts[0].prefill.dtype)
    logits = torch.empty(batch, talker.cfg.vocab_size, device=device, dtype=hidden.dtype)
    for b, prompt in enumerate(prompts):
        positions = torch.arange(lengths[b], device=device)[None]
        h, lg = talker(prompt.prefill[None], positions, stepper.cache.rows(b, b + 1))
        hidden[b], logits[b] = h[0, -1], lg[0, -1]

    track = torch.full((batch, options.max_frames), tts_pad_id, dtype=torch.long, device=device)
    for b, prompt in enumerate(prompts):
        n = min(len(prompt.text_track), options.max_frames)
        track[b, :n] = torch.tensor(prompt.text_track[:n], dtype=torch.long)
    text_rows = talker.embed_text(track)  # [B, max_frames, H]

    positions = torch.tensor(lengths, device=device)
    frames_done = torch.zeros(batch, dtype=torch.long, device=device)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    frames: list[Tensor] = []
    code0 = stepper.first_code(logits, frames_done, generators)
    for i in range(options.max_frames):
        ended |= code0 == talker.cfg.codec_eos_id
        if bool(ended.all()):  # the one host sync per frame, in this offline driver only
            break
        frame, hidden, logits = stepper.step(hidden, code0, text_rows[:, i], positions, generators)
        frames.append(torch.where(ended[:, None], -1, frame))
        frames_done += (~ended).long()
        positions = positions + 1
        if i + 1 < options.max_frames:
            code0 = stepper.first_code(logits, frames_done, generators)
    stacked = (
        torch.stack(frames, dim=1) if frames else torch.empty(batch, 0, 16, dtype=torch.long, device=device)
    )
    return [stacked[b, : int(frames_done[b])] for b in range(batch)]
