"""The engine's kernel choices are one value (engine.kernels): resolved once from the settings, the
device and the environment, held by every model part that launches kernels, and read nowhere else.
This machine has no GPU: CUDA devices are named, never used, and the device's compute capability
is stood in for."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from voicewire.engine.config import EngineConfig, SamplingParams
from voicewire.engine.kernels import choice as kernels
from voicewire.engine.kernels import fused_draw, pointwise
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model import code_predictor
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.model.sampling import Draw, RowSampling
from voicewire.engine.runtime.engine import Engine

ENGINE = Path(kernels.__file__).resolve().parents[1]
CUDA = torch.device("cuda", 0)


@pytest.fixture
def capability(monkeypatch: pytest.MonkeyPatch):
    """Stand in for the GPU's compute capability; returns a setter."""
    monkeypatch.delenv("VOICEWIRE_PDL", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    found = {"value": (9, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: found["value"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernels._capability_at_least_9.cache_clear()
    yield lambda value: found.update(value=value)
    kernels._capability_at_least_9.cache_clear()


def test_everything_is_off_on_a_cpu() -> None:
    """Whatever the settings say: Triton kernels and compiled pieces are for CUDA engines."""
    config = EngineConfig(fuse_kernels=True, fused_draw=True)
    assert Kernels.resolve(config, torch.device("cpu")) == Kernels()
    assert Kernels() == Kernels(False, False, False, False, False, False, False)


ALL_ON = Kernels(
    compiled=True,
    fused_layer=True,
    fused_draw=True,
    fused_snake=True,
    fused_conv=True,
    fused_window=True,
    fused_unit=True,
    pdl=True,
)


def test_cuda_defaults_turn_every_kernel_on(capability) -> None:
    assert Kernels.resolve(EngineConfig(), CUDA) == ALL_ON


def test_each_setting_turns_its_kernels_off(capability) -> None:
    unfused = Kernels.resolve(EngineConfig(fuse_kernels=False), CUDA)
    assert unfused == dataclasses.replace(ALL_ON, compiled=False, fused_layer=False, fused_snake=False)
    undrawn = Kernels.resolve(EngineConfig(fused_draw=False), CUDA)
    assert undrawn == dataclasses.replace(ALL_ON, fused_draw=False)
    cudnn = Kernels.resolve(EngineConfig(fused_conv=False), CUDA)
    assert cudnn == dataclasses.replace(
        ALL_ON, fused_conv=False, fused_unit=False
    )  # the unit needs the conv kernel
    units_as_convs = Kernels.resolve(EngineConfig(fused_unit=False), CUDA)
    assert units_as_convs == dataclasses.replace(ALL_ON, fused_unit=False)
    eager_window = Kernels.resolve(EngineConfig(fused_window=False), CUDA)
    assert eager_window == dataclasses.replace(ALL_ON, fused_window=False)


def test_the_unit_kernel_needs_the_conv_kernel_and_cuda(capability) -> None:
    assert not Kernels.resolve(EngineConfig(fused_unit=True, fused_conv=False), CUDA).fused_unit
    assert Kernels.resolve(EngineConfig(fused_unit=True), torch.device("cpu")) == Kernels()


def test_pdl_needs_hopper_and_may_be_turned_off(capability, monkeypatch: pytest.MonkeyPatch) -> None:
    capability((8, 0))
    assert not Kernels.resolve(EngineConfig(), CUDA).pdl
    capability((10, 0))
    kernels._capability_at_least_9.cache_clear()
    assert Kernels.resolve(EngineConfig(), CUDA).pdl
    for name, value in (("VOICEWIRE_PDL", "0"), ("TRITON_INTERPRET", "1")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            assert not Kernels.resolve(EngineConfig(), CUDA).pdl
    assert Kernels.resolve(EngineConfig(), CUDA).pdl  # read at resolve, not kept from before


def test_pdl_for_the_compiled_pieces_is_on_trial(capability, monkeypatch: pytest.MonkeyPatch) -> None:
    """VOICEWIRE_PDL=all launches Inductor's kernels with PDL too, where the engine's own kernels
    launch so and the pieces are compiled; by default, and with VOICEWIRE_PDL=1, only its own."""
    assert not Kernels.resolve(EngineConfig(), CUDA).pdl_compiled
    monkeypatch.setenv("VOICEWIRE_PDL", "1")
    assert not Kernels.resolve(EngineConfig(), CUDA).pdl_compiled
    monkeypatch.setenv("VOICEWIRE_PDL", "all")
    with monkeypatch.context() as env:
        env.setattr(pointwise, "inductor_has_pdl", lambda: False)  # torch 2.11
        assert not Kernels.resolve(EngineConfig(), CUDA).pdl_compiled
    monkeypatch.setattr(pointwise, "inductor_has_pdl", lambda: True)
    assert Kernels.resolve(EngineConfig(), CUDA) == dataclasses.replace(ALL_ON, pdl_compiled=True)
    assert not Kernels.resolve(EngineConfig(fuse_kernels=False), CUDA).pdl_compiled
    with monkeypatch.context() as env:
        env.setenv("TRITON_INTERPRET", "1")
        assert not Kernels.resolve(EngineConfig(), CUDA).pdl_compiled
    capability((8, 0))
    kernels._capability_at_least_9.cache_clear()
    assert not Kernels.resolve(EngineConfig(), CUDA).pdl_compiled


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor touches torch.jit
def test_pdl_for_the_compiled_pieces_goes_to_their_compile_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pdl_compiled`'s twins are compiled apart, with Inductor's PDL switch for that compile only
    (a CPU compile takes the option and ignores it); torch's process-wide config is as it was."""
    import torch._inductor.config as inductor_config

    pointwise.configure_compiler()
    before = inductor_config.get_config_copy()
    compiles: list[dict] = []
    compile_ = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **options: compiles.append(options) or compile_(fn, **options)
    )
    monkeypatch.setattr(pointwise, "_compiled", {})
    plain = Kernels(compiled=True, pdl=True).fuse(pointwise.silu_mul)
    with_pdl = Kernels(compiled=True, pdl=True, pdl_compiled=True).fuse(pointwise.silu_mul)
    assert with_pdl is not plain
    assert Kernels(compiled=True, pdl_compiled=True).fuse(pointwise.silu_mul) is with_pdl
    assert compiles == [
        {"dynamic": True, "options": None},
        {"dynamic": True, "options": {"triton.enable_pdl": True}},
    ]
    gate, up = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(with_pdl(gate, up), pointwise.silu_mul(gate, up))
    assert inductor_config.get_config_copy() == before


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inductor touches torch.jit
def test_fuse_picks_the_compiled_twin_only_when_compiled() -> None:
    assert Kernels().fuse(pointwise.silu_mul) is pointwise.silu_mul
    twin = Kernels(compiled=True).fuse(pointwise.silu_mul)
    assert twin is not pointwise.silu_mul and twin is pointwise.compiled(pointwise.silu_mul, pdl=False)
    with pytest.raises(ValueError, match="not marked @fusable"):
        pointwise.compiled(pointwise.rotate)


def _holders(model: Qwen3TTS) -> list[torch.nn.Module]:
    parts = (model.talker, model.decoder, model.codec_encoder, model.speaker_encoder)
    return [m for part in parts if part is not None for m in part.modules() if hasattr(m, "kernels")]


def test_binding_reaches_every_part_that_launches_kernels(tiny_checkpoints) -> None:
    model = Qwen3TTS.load(tiny_checkpoints["base"])
    holders = _holders(model)
    kinds = {type(m).__module__.rsplit(".", 1)[-1] + "." + type(m).__name__ for m in holders}
    assert {
        "layers.RMSNorm", "layers.Attention", "layers.MLP", "layers.DecoderLayer", "talker.TalkerModel",
        "layers.LayerScale", "talker.Talker", "code_predictor.CodePredictor", "code_predictor.CodePredictorModel", "codec_decoder.SnakeBeta",
        "codec_decoder.ConvNeXtBlock", "codec_decoder.Attention", "codec_decoder.Transformer",
        "codec_encoder.Attention",
    } <= kinds  # fmt: skip
    assert all(m.kernels == Kernels() for m in holders)  # built: everything off
    chosen = Kernels(fused_draw=True, pdl=True)
    model.use_kernels(chosen)
    assert all(m.kernels is chosen for m in holders)


def test_a_cpu_engine_binds_its_kernels_to_the_model(tiny_checkpoints) -> None:
    model = Qwen3TTS.load(tiny_checkpoints["custom_voice"])
    with Engine(model, EngineConfig(max_streams=1, kv_length=64)) as engine:
        assert engine.kernels == Kernels()
        assert all(m.kernels is engine.kernels for m in _holders(model))


@pytest.mark.parametrize("fused", [False, True])
def test_the_code_predictor_draws_as_its_kernels_say(
    tiny_checkpoints, monkeypatch: pytest.MonkeyPatch, fused: bool
) -> None:
    """With `fused_draw`, each of the 15 draws is the Triton kernel (its interpreter without a GPU),
    else `sampling.sample_keyed`; both give the same greedy codes."""
    # Where there is a GPU, Triton compiles for it and takes no CPU tensors.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Qwen3TTS.load(tiny_checkpoints["custom_voice"], device=device)
    model.use_kernels(Kernels(fused_draw=fused))
    predictor = model.talker.code_predictor
    calls: list[int] = []
    kernel, sample = fused_draw.draw, code_predictor.sample_keyed
    monkeypatch.setattr(fused_draw, "draw", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    monkeypatch.setattr(code_predictor, "sample_keyed", lambda *a, **k: calls.append(0) or sample(*a, **k))
    hidden = model.talker.cfg.decoder.hidden_size
    x = torch.randn(2, hidden, generator=torch.Generator().manual_seed(3)).to(device)
    zeros = torch.zeros(2, dtype=torch.long, device=device)
    with torch.inference_mode():
        codes = predictor.predict(
            x, x.flip(0), predictor.model.new_cache(2, predictor.cache_length),
            RowSampling.uniform(SamplingParams(do_sample=False), 2, device), zeros, zeros, Draw.GREEDY,
        )  # fmt: skip
    groups = model.talker.cfg.predictor.num_code_groups
    assert calls == [int(fused)] * (groups - 1) and codes.shape == (2, groups - 1)


def _reads_environment(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv"):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "getenv") for alias in node.names):
                return True
    return False


# Modules that may touch the environment, and why: none of them chooses a kernel.
ENVIRONMENT_ALLOWED = {
    "kernels/choice.py": "the one resolver of the kernel choices",
    "model/random_checkpoint.py": "VOICEWIRE_CACHE: where generated random checkpoints are kept",
    "vllm/launch.py": "sets the environment vLLM's own processes start with",
}


def test_only_the_resolver_reads_the_environment_for_kernels() -> None:
    readers = {
        str(path.relative_to(ENGINE))
        for path in sorted(ENGINE.rglob("*.py"))
        if _reads_environment(ast.parse(path.read_text()))
    }
    assert readers == set(ENVIRONMENT_ALLOWED)


def test_no_engine_module_keeps_a_switch_in_a_global() -> None:
    """`global` rebinding a module name is how a process-wide switch is set; the engine has none."""
    found = [
        f"{path.relative_to(ENGINE)}:{node.lineno}"
        for path in sorted(ENGINE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Global)
    ]
    assert found == []


def test_the_checks_find_what_they_look_for() -> None:
    assert _reads_environment(ast.parse("import os\nflag = os.environ.get('X')\n"))
    assert _reads_environment(ast.parse("from os import getenv\n"))
    assert not _reads_environment(ast.parse("import os\npath = os.path.join('a', 'b')\n"))
