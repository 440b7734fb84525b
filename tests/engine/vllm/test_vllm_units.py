"""The vllm backend's parts that need no vLLM: the worker's per-request rows and frame draws (checked
against the torch backend's frame step), chunk bookkeeping, the launch config and the version check."""

import pytest
import torch

from voicewire.engine.config import GenerationOptions
from voicewire.engine.model.prompt import build_voice_prompt, embed_rows, segment_rows
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.frame_step import FrameStepper
from voicewire.engine.vllm import VllmUnavailable, check_version
from voicewire.engine.vllm.launch import talker_hf_config
from voicewire.engine.vllm.sequence import (
    EOS,
    FRAME,
    FrameDrawer,
    SequenceSpec,
    SequenceState,
    TrackChunk,
    embed_positions,
)
from voicewire.engine.voice import Voice

FRAMES = 12


def _sequence(
    model: Qwen3TTS, greedy: bool
) -> tuple[SequenceSpec, torch.Tensor, list[int], GenerationOptions]:
    voice = build_voice_prompt(
        model.talker,
        model.tokenizer,
        model.text_ids,
        Voice(speaker="ryan", language="english"),
        model.variant,
        "0b6",
    )
    seq = [*model.tokenizer.encode("Hello there, how are you?"), model.text_ids.tts_eos]
    rows, held = segment_rows(voice, seq, "dual_track")
    rows = voice.prefix + rows
    options = GenerationOptions.from_generation_config(
        model.generation_config, greedy=greedy, suppress_eos=True
    )
    track = seq[held:]
    spec = SequenceSpec.build(rows, track[:3], False, model.text_ids.tts_pad, options, 1234, 5, None, None)
    return spec, embed_rows(model.talker, rows, None, None), track, options


@pytest.mark.parametrize("greedy", [True, False])
def test_worker_rows_and_draws_equal_the_torch_frame_step(tiny_models, greedy: bool) -> None:
    model = tiny_models["custom_voice"]
    talker = model.talker
    spec, prompt, track, options = _sequence(model, greedy)
    with torch.inference_mode():
        # The torch backend: one slot, the stream's noise rounds advanced by the spec's round_base.
        stepper = FrameStepper(talker, 1, 128)
        stepper.configure(0, options, seed=1234)
        stepper.apply_settings()
        stepper.rounds[0] = 5
        stepper.prefill([(0, prompt, 0)])
        expected = []
        for i in range(FRAMES):
            pad = model.text_ids.tts_pad
            expected.append(stepper.step(1, [True], [track[i] if i < len(track) else pad])[0, :16].clone())

        # The worker: rows from the request's own data through the same talker, KV in our cache.
        state = SequenceState.from_extra(spec.to_extra())
        state.apply(TrackChunk(1, track[3:], True).to_extra())
        state.apply(TrackChunk(1, track[3:], True).to_extra())  # a chunk seen twice applies once
        drawer = FrameDrawer(talker)
        cache = talker.model.new_cache(1, 128)
        positions = list(range(state.prompt_length))
        got = []
        for _ in range(FRAMES):
            rows = embed_positions(talker, [(state, p) for p in positions])
            hidden, logits = talker(rows[None], torch.tensor([positions]), cache.rows(0, 1))
            out = drawer.draw([state], logits[:, -1], hidden[:, -1])
            assert out[0, 0] == len(got) and out[0, 1] == FRAME
            got.append(out[0, 2:])
            positions = [positions[-1] + 1]
    assert torch.equal(torch.stack(got), torch.stack(expected))
    assert state.frames == torch.stack(got).tolist()


def test_prompt_rows_match_the_torch_prompt(tiny_models) -> None:
    model = tiny_models["custom_voice"]
    spec, prompt, _, _ = _sequence(model, True)
    state = SequenceState.from_extra(spec.to_extra())
    with torch.inference_mode():
        rows = embed_positions(model.talker, [(state, p) for p in range(state.prompt_length)])
    assert torch.equal(rows, prompt)


def test_feeds_wait_for_their_text_and_chunks_come_in_order(tiny_models) -> None:
    model = tiny_models["custom_voice"]
    spec, _, track, _ = _sequence(model, True)
    state = SequenceState.from_extra(spec.to_extra())
    state.frames = [[1] * 16] * 5
    assert state.feed_id(2) == track[2]
    with pytest.raises(ValueError, match="before its text id arrived"):
        state.feed_id(3)
    with pytest.raises(ValueError, match="feeds frame 5, but 5 were drawn"):
        embed_positions(model.talker, [(state, state.prompt_length + 5)])
    with pytest.raises(ValueError, match="chunk 2 arrived after chunk 0"):
        state.apply(TrackChunk(2, [9], False).to_extra())
    state.apply(TrackChunk(1, [9], True).to_extra())
    assert state.feed_id(3) == 9 and state.feed_id(40) == model.text_ids.tts_pad
    with pytest.raises(ValueError, match="after the track was complete"):
        state.apply(TrackChunk(2, [10], False).to_extra())
    with pytest.raises(ValueError, match="needs a SequenceSpec"):
        SequenceState.from_extra({})


def test_eos_ends_the_sequence(tiny_models) -> None:
    model = tiny_models["custom_voice"]
    spec, _, _, _ = _sequence(model, True)
    spec.suppress_eos = False
    state = SequenceState.from_extra(spec.to_extra())
    state.frames = [[5] * 16] * 3  # past the two-frame minimum
    logits = torch.full((1, 3072), -10.0)
    logits[0, model.talker.cfg.codec_eos_id] = 10.0
    out = FrameDrawer(model.talker).draw([state], logits, torch.zeros(1, 64))
    assert out[0, :3].tolist() == [3, EOS, model.talker.cfg.codec_eos_id] and state.ended
    assert len(state.frames) == 3


@pytest.mark.parametrize("version", ["0.32.0", "0.32.4+cpu", "0.32.1rc2"])
def test_supported_versions_pass(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["0.31.9", "0.33.0", "1.0.0", "dev"])
def test_other_versions_are_refused(version: str) -> None:
    with pytest.raises(VllmUnavailable, match=r"vllm>=0\.32,<0\.33"):
        check_version(version)


def test_vllm_sees_the_talker_as_a_qwen3_decoder(tiny_checkpoints) -> None:
    from voicewire.engine.model import checkpoint

    config = checkpoint.read_json(tiny_checkpoints["custom_voice"] / "config.json")
    hf = talker_hf_config(config, 512, "float32")
    talker = config["talker_config"]
    assert hf["architectures"] == ["VoicewireQwen3TTSTalker"] and hf["model_type"] == "qwen3"
    assert (hf["hidden_size"], hf["num_hidden_layers"], hf["head_dim"], hf["vocab_size"]) == (64, 2, 32, 3072)
    assert hf["rope_parameters"] == {"rope_type": "default", "rope_theta": talker["rope_theta"]}
    assert hf["max_position_embeddings"] == 512 and hf["talker_config"] == talker


def test_engine_args_for_cpu_and_cuda(tiny_checkpoints) -> None:
    from voicewire.engine.config import EngineConfig
    from voicewire.engine.vllm.launch import engine_args

    folder = tiny_checkpoints["custom_voice"]
    cpu = engine_args(folder, EngineConfig(backend="vllm", max_streams=4, kv_length=160))
    assert cpu["worker_cls"].endswith("CpuTalkerWorker") and cpu["enforce_eager"] and cpu["block_size"] == 32
    assert cpu["kv_cache_memory_bytes"] == 2**30 and "gpu_memory_utilization" not in cpu
    assert (cpu["max_model_len"], cpu["max_num_seqs"], cpu["model"]) == (160, 4, str(folder))
    assert not cpu["enable_prefix_caching"] and not cpu["async_scheduling"]
    config = EngineConfig.from_yaml("configs/vllm-2gpu.yaml", model=str(folder))
    gpu = engine_args(folder, config)
    assert gpu["worker_cls"].endswith("GpuTalkerWorker") and not gpu["enforce_eager"]
    assert gpu["data_parallel_size"] == 2 and gpu["gpu_memory_utilization"] == 0.6
    assert "kv_cache_memory_bytes" not in gpu and gpu["block_size"] is None and gpu["dtype"] == "bfloat16"
