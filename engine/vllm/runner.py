"""The vLLM worker side: a model runner that feeds the talker from per-request state and draws whole
frames, and the workers that install it (V1 model runner; CPU and CUDA).

Three hooks on vLLM's V1 `GPUModelRunner` (which the CPU runner extends):
- `_update_states`: requests come, get more text (streaming-input chunks) and go;
  `SequenceState`s follow them, keyed by vLLM's request id, and survive preemption.
- `_preprocess`: every scheduled position's input row is written into the model's `input_rows`.
- `_sample`: code 0 is chosen with our own penalty, masks and counter-keyed noise, then the code
  predictor completes the frame; the frame goes back as the request's pooler output, and code 0
  as its sampled token (EOS stops the request).
vLLM's own sampler never runs: the draw must equal the torch backend's, and it needs per-request
state vLLM's sampler does not have.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker

from voicewire.engine.vllm.sequence import FRAME, FrameDrawer, SequenceState, embed_positions

log = logging.getLogger(__name__)


class TalkerRunnerMixin:
    """The hooks, for any V1 runner class (mixed in before it)."""

    def _voicewire_init(self) -> None:
        self.sequences: dict[str, SequenceState] = {}
        self._drawer: FrameDrawer | None = None
        self._frames: list[torch.Tensor | None] | None = None

    def _update_states(self, scheduler_output):  # type: ignore[no-untyped-def]
        result = super()._update_states(scheduler_output)  # type: ignore[misc]
        for req_id in scheduler_output.finished_req_ids:
            self.sequences.pop(req_id, None)
        for req_id in scheduler_output.preempted_req_ids or ():
            log.warning("request %s was preempted: it resumes by recomputing its frame history", req_id)
        for req_id, request in self.requests.items():  # type: ignore[attr-defined]
            extra = request.sampling_params.extra_args if request.sampling_params else None
            state = self.sequences.get(req_id)
            if state is None:
                self.sequences[req_id] = SequenceState.from_extra(extra)
            else:
                state.apply(extra)
        return result

    def _preprocess(self, scheduler_output, num_input_tokens, intermediate_tensors=None):  # type: ignore[no-untyped-def]
        out = super()._preprocess(scheduler_output, num_input_tokens, intermediate_tensors)  # type: ignore[misc]
        batch = self.input_batch  # type: ignore[attr-defined]
        rows = []
        for i, req_id in enumerate(batch.req_ids):
            state = self.sequences[req_id]
            first = int(batch.num_computed_tokens_cpu[i])
            count = scheduler_output.num_scheduled_tokens[req_id]
            rows.extend((state, first + k) for k in range(count))
        model = self.get_model()  # type: ignore[attr-defined]
        with torch.inference_mode():
            model.input_rows[: len(rows)] = embed_positions(model.parts, rows)
        return out

    def _sample(self, logits, spec_decode_metadata):  # type: ignore[no-untyped-def]
        if spec_decode_metadata is not None:
            raise RuntimeError("speculative decoding is not supported by the voicewire talker")
        model = self.get_model()  # type: ignore[attr-defined]
        if self._drawer is None:
            self._drawer = FrameDrawer(model.parts)
        batch = self.input_batch  # type: ignore[attr-defined]
        n = batch.num_reqs
        discard = self.discard_request_mask.np[:n]  # type: ignore[attr-defined]
        tokens = torch.zeros(n, 1, dtype=torch.int32, device=logits.device)
        frames: list[torch.Tensor | None] = [None] * n
        rows = np.nonzero(~discard.astype(bool))[0].tolist()
        states = [self.sequences[batch.req_ids[i]] for i in rows]
        live = [(i, s) for i, s in zip(rows, states, strict=True) if not s.ended]
        if live:
            index = torch.tensor([i for i, _ in live], device=logits.device)
            out = self._drawer.draw([s for _, s in live], logits[index], model.sampled_hidden[index])
            code0 = out[:, 2].to(torch.int32)
            # EOS and non-finite rows stop the request: report EOS as the token.
            eos = self._drawer.talker.cfg.codec_eos_id
            code0 = torch.where(out[:, 1] == FRAME, code0, eos)
            tokens[index, 0] = code0
            for (i, _), row in zip(live, out.cpu(), strict=True):
                frames[i] = row
        self._frames = frames
        return SamplerOutput(sampled_token_ids=tokens, logprobs_tensors=None)

    def sample_tokens(self, grammar_output):  # type: ignore[no-untyped-def]
        self._frames = None
        output = super().sample_tokens(grammar_output)  # type: ignore[misc]
        if self._frames is not None:
            target = getattr(output, "_model_runner_output", output)
            if hasattr(target, "pooler_output") and target.req_ids:
                target.pooler_output = self._frames
            self._frames = None
        return output


class CpuTalkerRunner(TalkerRunnerMixin, CPUModelRunner):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._voicewire_init()


class GpuTalkerRunner(TalkerRunnerMixin, GPUModelRunner):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._voicewire_init()


class CpuTalkerWorker(CPUWorker):
    """vLLM's CPU worker with the talker runner (it builds its runner last in init_device)."""

    def init_device(self) -> None:
        super().init_device()
        self.model_runner = CpuTalkerRunner(self.vllm_config, torch.device("cpu"))


class GpuTalkerWorker(Worker):
    """vLLM's GPU worker with the talker runner on the V1 model runner."""

    def _make_model_runner(self) -> GPUModelRunner:
        if self.use_v2_model_runner:
            raise RuntimeError(
                "the voicewire talker runs on the V1 model runner: set VLLM_USE_V2_MODEL_RUNNER=0"
            )
        return GpuTalkerRunner(self.vllm_config, self.device)
