from pathlib import Path

import pytest

from voicewire.engine.config import (
    ChunkSchedule,
    EngineConfig,
    FirstChunkAlone,
    PrefillWait,
    SpeechGuard,
    UrgentChunks,
)
from voicewire.engine.errors import InvalidOptions
from voicewire.engine.runtime.segments import Segment, SegmentPolicy

CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.mark.parametrize("profile", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_profile_loads(profile: Path) -> None:
    from voicewire.server.config import ServerConfig

    config = EngineConfig.from_yaml(profile)
    assert config.max_streams >= 1 and config.kv_length >= 256
    assert ServerConfig.from_yaml(profile).port == 8000
    if profile.name.startswith("vllm-"):
        assert config.backend == "vllm" and config.device == "cuda"
    assert isinstance(config.segments, SegmentPolicy) and isinstance(config.chunks, ChunkSchedule)
    assert config.chunks.first_frames <= 2  # a small first chunk by default


def test_profiles_cover_cpu_and_gpu() -> None:
    cpu, gpu = EngineConfig.from_yaml(CONFIGS / "cpu.yaml"), EngineConfig.from_yaml(CONFIGS / "gpu.yaml")
    assert (cpu.device, cpu.model, cpu.dtype) == ("cpu", "tiny", "float32")
    assert gpu.device == "cuda" and gpu.dtype == "bfloat16" and gpu.max_streams >= 256
    # The burst cap binds above the 256 streams of a steady full load, never at it (docs/benchmarks.md).
    urgent = gpu.urgent_chunks
    assert (urgent.bulk_rows, urgent.busy_streams, urgent.busy_bulk_rows) == (128, 320, 32)
    assert 256 < urgent.busy_streams < gpu.max_streams


def test_gpu_profile_divides_the_cpus_among_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from voicewire.server.config import ServerConfig

    server = ServerConfig.from_yaml(CONFIGS / "gpu.yaml")
    # docs/benchmarks.md, session 41: 5 workers of 3 codec threads on a 16-CPU host (H100 boxes);
    # with more workers than CPUs each still gets one.
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert (server.workers, server.codec_thread_count) == (5, 3)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert server.codec_thread_count == 1


def test_overrides_and_schedule() -> None:
    config = EngineConfig.from_yaml(CONFIGS / "cpu.yaml", max_streams=3, device=None)
    assert config.max_streams == 3 and config.device == "cpu"
    assert [config.chunks.size(i) for i in range(6)] == [1, 2, 4, 8, 8, 8]


def test_bad_settings_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match="unknown engine settings: max_stream; allowed:"):
        EngineConfig.from_dict({"max_stream": 4})
    with pytest.raises(InvalidOptions, match="chunk sizes must be whole numbers >= 1"):
        EngineConfig.from_dict({"chunks": {"frames": [0]}})
    with pytest.raises(InvalidOptions, match="kv_length must be >= 64"):
        EngineConfig(kv_length=10)
    with pytest.raises(InvalidOptions, match="unknown prefill_wait settings: max; allowed: max_s, prompts"):
        EngineConfig.from_dict({"prefill_wait": {"max": 1}})
    # Every section is read alike: a misspelt key or a non-mapping is named, not a TypeError.
    with pytest.raises(
        InvalidOptions, match="unknown segments settings: max_token; allowed: max_tokens, sentence_tokens"
    ):
        EngineConfig.from_dict({"segments": {"max_token": 40}})
    with pytest.raises(InvalidOptions, match="unknown chunks settings: frame; allowed: first_frames, frames"):
        EngineConfig.from_dict({"chunks": {"frame": [2]}})
    with pytest.raises(InvalidOptions, match="engine setting 'chunks' must be a mapping"):
        EngineConfig.from_dict({"chunks": [1, 2]})
    assert EngineConfig.from_dict({"chunks": {"frames": [1, 2]}}).chunks.frames == (1, 2)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(InvalidOptions, match="expected a mapping with an 'engine:' section"):
        EngineConfig.from_yaml(bad)


def test_urgent_chunks_are_off_unless_set() -> None:
    assert EngineConfig().urgent_chunks == UrgentChunks(in_hand_s=0.0)
    assert EngineConfig.from_dict({"urgent_chunks": {"in_hand_s": 0.5}}).urgent_chunks == UrgentChunks(0.5)
    for setting in ("in_hand_s", "bulk_rows", "urgent_rows", "join_for_s", "busy_streams", "busy_bulk_rows"):
        with pytest.raises(
            InvalidOptions,
            match="urgent_chunks needs in_hand_s, bulk_rows, urgent_rows, join_for_s, busy_streams and busy_bulk_rows >= 0",
        ):
            EngineConfig.from_dict({"urgent_chunks": {setting: -1}})
    busy = EngineConfig.from_dict(
        {"urgent_chunks": {"bulk_rows": 128, "busy_streams": 320, "busy_bulk_rows": 32}}
    )
    assert busy.urgent_chunks == UrgentChunks(bulk_rows=128, busy_streams=320, busy_bulk_rows=32)
    for alone in ({"busy_streams": 320}, {"busy_bulk_rows": 32}):
        with pytest.raises(
            InvalidOptions,
            match=r"urgent_chunks.busy_streams and busy_bulk_rows go together \(both 0: off\)",
        ):
            EngineConfig.from_dict({"urgent_chunks": alone})
    with pytest.raises(
        InvalidOptions,
        match="unknown urgent_chunks settings: in_hand; allowed: bulk_rows, busy_bulk_rows, busy_streams, in_hand_s, join_final, join_for_s, join_waiting, shared_passes, urgent_rows",
    ):
        EngineConfig.from_dict({"urgent_chunks": {"in_hand": 0.5}})
    joining = EngineConfig.from_dict({"urgent_chunks": {"in_hand_s": 1.0, "join_waiting": True}})
    assert joining.urgent_chunks == UrgentChunks(1.0, join_waiting=True, join_for_s=0.1)
    briefly = EngineConfig.from_dict({"urgent_chunks": {"join_waiting": True, "join_for_s": 0.02}})
    assert briefly.urgent_chunks.join_for_s == 0.02
    finals = EngineConfig.from_dict({"urgent_chunks": {"join_waiting": True, "join_final": True}})
    assert finals.urgent_chunks == UrgentChunks(join_waiting=True, join_final=True)
    with pytest.raises(
        InvalidOptions,
        match=r"urgent_chunks\.join_final joins the round as join_waiting does: turn that on too",
    ):
        EngineConfig.from_dict({"urgent_chunks": {"join_final": True}})
    for name in ("join_waiting", "shared_passes", "join_final"):
        with pytest.raises(
            InvalidOptions, match=f"urgent_chunks.{name} should be a valid boolean, got 'yes'"
        ):
            EngineConfig.from_dict({"urgent_chunks": {name: "yes"}})
    shared = EngineConfig.from_dict({"urgent_chunks": {"in_hand_s": 1.0, "shared_passes": True}})
    assert shared.urgent_chunks == UrgentChunks(1.0, shared_passes=True)


def test_settings_of_the_wrong_type_are_named_at_load() -> None:
    """Strict types, in the profile's top level and in its sections: a quoted number, a float for a
    count, true for a number or null for a required setting is an error naming the setting, not a
    TypeError in a check (`"x" < 0`) nor 1000.0 KV positions."""
    refused = [
        ({"max_streams": "512"}, "engine setting max_streams should be a valid integer, got '512'"),
        ({"kv_length": 768.0}, "engine setting kv_length should be a valid integer, got 768.0"),
        ({"max_streams": True}, "engine setting max_streams should be a valid integer, got True"),
        ({"cuda_graphs": "no"}, "engine setting cuda_graphs should be a valid boolean, got 'no'"),
        ({"device": None}, "engine setting device should be a valid string, got None"),
        (
            {"urgent_chunks": {"bulk_rows": "x"}},
            "engine setting urgent_chunks.bulk_rows should be a valid integer",
        ),
        ({"prefill_wait": {"max_s": "20ms"}}, "engine setting prefill_wait.max_s should be a valid number"),
        (
            {"chunks": {"frames": [1, "2"]}},
            r"engine setting chunks.frames should be a valid integer, got \(1, '2'\)",
        ),
        ({"vllm": {"kv_cache_gib": "8"}}, "engine setting vllm.kv_cache_gib should be a valid number"),
    ]
    for data, message in refused:
        with pytest.raises(InvalidOptions, match=message):
            EngineConfig.from_dict(data)
    # A whole number where a float is due is that float; null where None is allowed is None.
    typed = EngineConfig.from_dict(
        {"max_buffered_seconds": 30, "segments": {"max_tokens": None}, "vllm": {"kv_cache_gib": 8}}
    )
    assert typed.max_buffered_seconds == 30.0 and isinstance(typed.max_buffered_seconds, float)
    assert typed.segments.max_tokens is None and typed.vllm.kv_cache_gib == 8.0


def test_from_config_takes_a_config_with_overrides() -> None:
    from voicewire.engine import Engine

    with Engine.from_config(
        EngineConfig(kv_length=128, segments=SegmentPolicy(10, 20)), max_streams=2
    ) as engine:
        assert engine.config.max_streams == 2 and engine.config.kv_length == 128
        assert engine.config.segments == SegmentPolicy(10, 20) and engine.used_slots == 0


def test_prefill_wait_is_off_unless_set_and_the_torch_schedulers_alone() -> None:
    assert EngineConfig().prefill_wait == PrefillWait(max_s=0.0, prompts=8)
    config = EngineConfig.from_dict({"prefill_wait": {"max_s": 0.02, "prompts": 16}})
    assert config.prefill_wait == PrefillWait(max_s=0.02, prompts=16)
    with pytest.raises(InvalidOptions, match="unknown prefill_wait settings: wait; allowed: max_s, prompts"):
        EngineConfig.from_dict({"prefill_wait": {"wait": 1}})
    with pytest.raises(InvalidOptions, match="prefill_wait needs max_s >= 0 and prompts >= 1"):
        EngineConfig.from_dict({"prefill_wait": {"prompts": 0}})
    with pytest.raises(InvalidOptions, match="vLLM schedules its own prefills"):
        EngineConfig(backend="vllm", prefill_wait=PrefillWait(max_s=0.01))


def test_first_chunk_alone_is_off_unless_set_and_the_torch_schedulers_alone() -> None:
    assert EngineConfig().first_chunk_alone == FirstChunkAlone(rows=0, wait_s=0.005)
    config = EngineConfig.from_dict({"first_chunk_alone": {"rows": 8}})
    assert config.first_chunk_alone == FirstChunkAlone(rows=8, wait_s=0.005)
    assert EngineConfig.from_yaml(CONFIGS / "gpu.yaml").first_chunk_alone.rows == 8
    with pytest.raises(
        InvalidOptions, match="unknown first_chunk_alone settings: streams; allowed: rows, wait_s"
    ):
        EngineConfig.from_dict({"first_chunk_alone": {"streams": 8}})
    with pytest.raises(InvalidOptions, match="first_chunk_alone needs rows >= 0 and wait_s >= 0"):
        FirstChunkAlone(wait_s=-1)
    with pytest.raises(InvalidOptions, match="vLLM launches its own steps"):
        EngineConfig(backend="vllm", first_chunk_alone=FirstChunkAlone(rows=8))


def test_the_speech_guard_section_and_its_bound() -> None:
    assert EngineConfig().speech_guard == SpeechGuard(after_text_s=3.0, per_token_s=0.5)
    guard = EngineConfig.from_dict({"speech_guard": {"after_text_s": 2.0}}).speech_guard
    assert guard == SpeechGuard(2.0, 0.5)
    with pytest.raises(InvalidOptions, match="unknown speech_guard settings: seconds"):
        EngineConfig.from_dict({"speech_guard": {"seconds": 2}})
    with pytest.raises(InvalidOptions, match="speech_guard needs after_text_s > 0"):
        SpeechGuard(after_text_s=0)
    # 4 text ids and tts_eos, 2 of them in the prompt: 3 frames still feed text, then 2 + 0.5 x 4 s.
    segment = Segment(seq=[11, 12, 13, 14, 2], tokens=[None] * 5, complete=True, body=4, start=2)
    assert guard.frames(segment) == 3 + 50
    assert guard.frames(Segment(seq=[11], tokens=[None], body=1, start=0)) is None  # text still coming
    assert guard.frames(Segment(seq=[11, 2], tokens=[None] * 2, complete=True, body=1)) is None  # not started
