"""Official end-to-end synthesis for a list of jobs; writes codes and audio per job.

Usage: synthesize.py JOBS.json OUT_DIR
Each job: {"name", "model", "kind": custom_voice|voice_design|voice_clone, "text", "language",
"speaker"?, "instruct"?, "ref_audio"? (wav path), "ref_text"?, "x_vector_only"?, "non_streaming_mode",
"max_new_tokens", "suppress_eos"?}. Greedy: do_sample and subtalker_dosample are False; the
talker's repetition penalty from generation_config.json still applies, as in the official greedy mode.
Writes OUT_DIR/<name>.npz with codes [frames, 16] (what the decoder received, reference codes
excluded) and wav.
"""

import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from official import load_model


def _capture_decode(tts, captured: list) -> None:
    tokenizer = tts.model.speech_tokenizer
    original = tokenizer.decode

    def decode(items, *args, **kwargs):
        captured.extend(item["audio_codes"].clone() for item in items)
        return original(items, *args, **kwargs)

    tokenizer.decode = decode


def _suppress_eos(tts) -> None:
    # Forces the length: EOS joins the suppressed ids, as our engine's suppress_eos does.
    talker = tts.model.talker
    original = talker.generate
    eos = tts.model.config.talker_config.codec_eos_token_id

    def generate(*args, **kwargs):
        kwargs["suppress_tokens"] = [*kwargs["suppress_tokens"], eos]
        return original(*args, **kwargs)

    talker.generate = generate


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    out_dir = Path(sys.argv[2])
    models: dict[tuple[str, bool], tuple[object, list]] = {}
    for job in jobs:
        key = (job["model"], bool(job.get("suppress_eos")))
        if key not in models:
            tts, captured = load_model(job["model"]), []
            _capture_decode(tts, captured)
            if job.get("suppress_eos"):
                _suppress_eos(tts)
            models[key] = (tts, captured)
        tts, captured = models[key]
        captured.clear()
        common = dict(
            language=job["language"],
            non_streaming_mode=job["non_streaming_mode"],
            do_sample=False,
            subtalker_dosample=False,
            max_new_tokens=job["max_new_tokens"],
        )
        torch.manual_seed(0)
        if job["kind"] == "custom_voice":
            wavs, sr = tts.generate_custom_voice(
                text=job["text"], speaker=job["speaker"], instruct=job.get("instruct"), **common
            )
        elif job["kind"] == "voice_design":
            wavs, sr = tts.generate_voice_design(text=job["text"], instruct=job["instruct"], **common)
        else:
            audio, ref_sr = sf.read(job["ref_audio"], dtype="float32")
            prompt = tts.create_voice_clone_prompt(
                ref_audio=(audio, ref_sr),
                ref_text=job.get("ref_text"),
                x_vector_only_mode=bool(job.get("x_vector_only")),
            )
            wavs, sr = tts.generate_voice_clone(text=job["text"], voice_clone_prompt=prompt, **common)
            ref_code = prompt[0].ref_code
            if ref_code is not None:
                captured[-1] = captured[-1][ref_code.shape[0] :]
        assert sr == 24000
        np.savez(
            out_dir / f"{job['name']}.npz",
            codes=captured[-1].numpy().astype(np.int64),
            wav=np.asarray(wavs[0], dtype=np.float32),
        )


if __name__ == "__main__":
    main()
