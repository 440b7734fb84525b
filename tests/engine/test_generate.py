import pytest
import torch

from voicewire.engine.generate import GenerationOptions, generate_codes
from voicewire.engine.model import Qwen3TTS
from voicewire.engine.prompt import Voice, build_prompt


@pytest.fixture(scope="module")
def model(tiny_models) -> Qwen3TTS:
    return tiny_models["custom_voice"]


def _prompt(model: Qwen3TTS, text: str, speaker: str, layout: str = "dual_track"):
    voice = Voice(speaker=speaker, language="english")
    return build_prompt(
        model.talker, model.tokenizer, model.text_ids, text, voice, layout, model.variant, "0b6"
    )


def _options(model: Qwen3TTS, **kwargs) -> GenerationOptions:
    return GenerationOptions.from_generation_config(model.generation_config, **kwargs)


def test_batched_streams_equal_each_alone(model: Qwen3TTS) -> None:
    prompts = [
        _prompt(model, "A short line.", "vivian"),
        _prompt(model, "A somewhat longer line of text, to get a longer prompt.", "ryan", "non_streaming"),
        _prompt(model, "Third.", "serena"),
    ]
    options = _options(model, greedy=True, max_frames=15, suppress_eos=True)
    batched = generate_codes(model.talker, prompts, options)
    for prompt, together in zip(prompts, batched, strict=True):
        alone = generate_codes(model.talker, [prompt], options)[0]
        assert together.shape == (15, 16)
        assert torch.equal(together, alone)


def test_seeded_streams_are_independent_of_batch_mates(model: Qwen3TTS) -> None:
    a, b = _prompt(model, "Sampling with a seed.", "vivian"), _prompt(model, "Another stream.", "aiden")
    options = _options(model, max_frames=10, suppress_eos=True)
    together = generate_codes(model.talker, [a, b], options, seeds=[5, 6])
    assert torch.equal(together[0], generate_codes(model.talker, [a], options, seeds=[5])[0])
    assert torch.equal(together[1], generate_codes(model.talker, [b], options, seeds=[6])[0])
    assert not torch.equal(together[0], generate_codes(model.talker, [a], options, seeds=[7])[0])


def test_codes_are_in_range_and_eos_is_excluded(model: Qwen3TTS) -> None:
    codes = generate_codes(
        model.talker, [_prompt(model, "Range check.", "eric")], _options(model, max_frames=30)
    )[0]
    assert codes.dtype == torch.long and codes.shape[1] == 16
    assert 2 <= codes.shape[0] <= 30
    assert int(codes.min()) >= 0 and int(codes.max()) < 2048


def test_max_frames_must_be_positive(model: Qwen3TTS) -> None:
    with pytest.raises(ValueError, match="max_frames"):
        _options(model, max_frames=0)
