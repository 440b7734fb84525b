"""The code predictor: per frame, 15 residual codes from the talker's hidden state and code 0."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.layers import AttentionInputs, DecoderConfig, DecoderStack, KVCache
from voicewire.engine.model.sampling import Draw, RowSampling, noise_key, sample_keyed


@dataclass
class CodePredictorConfig:
    decoder: DecoderConfig
    vocab_size: int  # entries per residual codebook (2048)
    num_code_groups: int  # 16: code 0 from the talker, 1..15 from here

    @classmethod
    def from_dict(cls, d: dict) -> CodePredictorConfig:
        return cls(DecoderConfig.from_dict(d), d["vocab_size"], d["num_code_groups"])


class CodePredictorModel(DecoderStack):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__(cfg.decoder)
        # Residual code embeddings live in talker width: they also feed the talker's next input.
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, talker_hidden) for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = CodePredictorModel(cfg, talker_hidden)
        hidden = cfg.decoder.hidden_size
        self.lm_head = nn.ModuleList(
            nn.Linear(hidden, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1)
        )
        self.small_to_mtp_projection: nn.Module = (
            nn.Linear(talker_hidden, hidden, bias=True) if hidden != talker_hidden else nn.Identity()
        )
        self.kernels = Kernels()

    @property
    def cache_length(self) -> int:
        # positions 0,1 (talker hidden, code 0) then codes 1..14 as inputs
        return self.cfg.num_code_groups

    def predict(
        self,
        talker_hidden: Tensor,
        code0_embedding: Tensor,
        cache: KVCache,
        params: RowSampling,
        seed: Tensor,
        counter: Tensor,
        draw: Draw,
    ) -> Tensor:
        """[B, H] talker hidden + [B, H] code-0 embedding -> codes 1..15 [B, 15].

        `cache` is this predictor's own KV cache (length 16), overwritten every frame. Code k
        draws with noise counter `counter + k` (see sampling.sample). With `Kernels.fused_draw`,
        each draw and the next step's embedding lookup run as one Triton kernel (engine.fused_draw;
        CUDA).
        """
        kernels = self.kernels
        b, last = talker_hidden.shape[0], self.cfg.num_code_groups - 2
        device = talker_hidden.device
        x = self.small_to_mtp_projection(torch.stack((talker_hidden, code0_embedding), dim=1))
        positions = torch.arange(2, device=device).expand(b, 2)
        # Positions of codes 1..14 as inputs, made at once: [14, B', 1], each step's rows contiguous,
        # B' = B rounded up to even so that every step's rows start 16-byte aligned, as compiled
        # kernels assume of their inputs.
        steps = (
            torch.arange(2, last + 2, device=device)[:, None, None].expand(last, b + b % 2, 1).contiguous()
        )
        codes: list[Tensor] = []
        out = torch.empty(b, last + 1, dtype=torch.long, device=device) if kernels.fused_draw else None
        # Eager draws: every draw's noise key [B, 15] in one pass, not a dozen small ops per draw.
        # Eager layers: the attention inputs of the 14 steps at once, each step's as views.
        step_inputs: list[AttentionInputs] | None = None
        if not kernels.fused_layer:
            made = self.model.attention_inputs(steps[:, :b].reshape(-1, 1), cache, x.dtype)
            step_inputs = list(zip(*(t.view(last, b, *t.shape[1:]).unbind(0) for t in made), strict=True))
        keys = None
        if out is None and draw != Draw.GREEDY:
            keys = noise_key(seed[:, None], counter[:, None] + torch.arange(1, last + 2, device=device))
        inputs = None
        for k in range(last + 1):
            logits = self.model.last_logits(x, positions, cache, self.lm_head[k], inputs)
            table = self.model.codec_embedding[k].weight if k < last else None
            if out is not None:
                from voicewire.engine.kernels import (
                    fused_draw as kernel,  # Triton, which CUDA builds of torch carry
                )

                code, row = kernel.draw(
                    logits, params, seed, counter, k + 1, out[:, k], table, pdl=kernels.pdl
                )
            else:
                key = keys[:, k] if keys is not None else seed  # greedy draws need no noise
                code = kernels.fuse(sample_keyed)(logits, params, key, draw)
                row = None if table is None else F.embedding(code, table)
            codes.append(code)
            if row is None:
                break
            x = self.small_to_mtp_projection(row)[:, None]
            positions = steps[k, :b]
            inputs = step_inputs[k] if step_inputs is not None else None
        return out if out is not None else torch.stack(codes, dim=1)
