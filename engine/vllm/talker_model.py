"""The talker as a vLLM model: vLLM's Qwen3 decoder (paged KV, its attention kernels) for the 28
layers, and our own modules for everything around them.

Input rows are not looked up from token ids: the runner (`runner.py`) writes each scheduled
position's row into `input_rows` before the forward, from the request's own data
(`sequence.embed_positions`). The buffer keeps one address, so CUDA graphs can replay over it.
`compute_logits` keeps the hidden states it is given: the code predictor needs them after sampling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from torch import Tensor, nn
from vllm.config import VllmConfig
from vllm.model_executor.models.qwen3 import Qwen3Model
from vllm.model_executor.models.utils import maybe_prefix

from voicewire.engine.model.talker import Talker, TalkerConfig
from voicewire.engine.model.weights import load_into


class VllmTalker(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        hf_config = vllm_config.model_config.hf_config
        cfg = TalkerConfig.from_dict(hf_config.talker_config)
        self.cfg = cfg
        self.model = Qwen3Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        # Our talker without its decoder layers: embeddings, text projection, codec head, code predictor.
        self.parts = Talker(dataclasses.replace(cfg, decoder=dataclasses.replace(cfg.decoder, num_layers=0)))
        max_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.register_buffer("input_rows", torch.zeros(max_tokens, cfg.decoder.hidden_size), persistent=False)
        self.sampled_hidden: Tensor | None = None

    def embed_input_ids(self, input_ids: Tensor) -> Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: Tensor | None,
        positions: Tensor,
        intermediate_tensors: object = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        return self.model(None, positions, None, self.input_rows[: positions.shape[0]])

    def compute_logits(self, hidden_states: Tensor) -> Tensor:
        self.sampled_hidden = hidden_states
        return self.parts.codec_head(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> set[str]:
        """Checkpoint tensors (talker.* of model.safetensors): the decoder layers and final norm go to
        vLLM's Qwen3 model, everything else to our modules, checked like our own loader checks them."""
        ours: dict[str, Tensor] = {}

        def decoder_weights() -> Iterable[tuple[str, Tensor]]:
            for name, tensor in weights:
                if not name.startswith("talker."):
                    continue  # speaker_encoder.*: it runs in the front end
                name = name[len("talker.") :]
                if name.startswith("model.layers."):
                    yield name[len("model.") :], tensor
                    continue
                if name == "model.norm.weight":
                    yield "norm.weight", tensor
                elif name == "model.codec_embedding.weight":
                    yield "embed_tokens.weight", tensor
                ours[name] = tensor

        loaded = {f"model.{name}" for name in self.model.load_weights(decoder_weights())}
        load_into(self.parts, ours, "model.safetensors (talker., outside the decoder layers)")
        loaded.update(f"parts.{name}" for name, _ in self.parts.named_parameters())
        return loaded
