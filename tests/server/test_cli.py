import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voicewire.server.cli import build_parser, main


def test_synth_writes_wav_of_frames_times_1920(tiny_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    out, codes_out = tmp_path / "out.wav", tmp_path / "codes.npy"
    rc = main(
        [
            "synth",
            "--model",
            str(tiny_checkpoints["custom_voice"]),
            "--text",
            "Hello there, this is a test.",
            "--speaker",
            "vivian",
            "--language",
            "english",
            "--greedy",
            "--max-frames",
            "12",
            "--out",
            str(out),
            "--codes-out",
            str(codes_out),
        ]
    )
    assert rc == 0
    audio, sr = sf.read(out, dtype="float32")
    codes = np.load(codes_out)
    assert sr == 24000
    assert codes.ndim == 2 and codes.shape[1] == 16
    assert 2 <= codes.shape[0] <= 12
    assert np.issubdtype(codes.dtype, np.integer)
    assert codes.min() >= 0 and codes.max() < 2048
    assert audio.shape == (codes.shape[0] * 1920,)
    assert float(np.sqrt(np.mean(audio**2))) > 1e-3


def test_unknown_speaker_is_a_clear_error(
    tiny_checkpoints: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = ["synth", "--model", str(tiny_checkpoints["custom_voice"]), "--text", "Hi", "--speaker", "nobody"]
    rc = main([*argv, "--out", str(tmp_path / "x.wav")])
    assert rc == 2
    assert "nobody" in caplog.text and "vivian" in caplog.text
    assert not (tmp_path / "x.wav").exists()


def test_make_checkpoint_then_console_script_synth(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    ckpt = tmp_path / "vd"
    subprocess.run(
        [bin_dir / "voicewire", "make-checkpoint", str(ckpt), "--variant", "voice_design", "--size", "tiny"],
        check=True,
    )
    for name in ("config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt"):
        assert (ckpt / name).is_file()
    assert (ckpt / "speech_tokenizer" / "model.safetensors").is_file()
    out = tmp_path / "vd.wav"
    args = ["--text", "Good morning.", "--instruct", "A calm, low voice.", "--seed", "7", "--max-frames", "5"]
    done = subprocess.run(
        [bin_dir / "voicewire", "synth", "--model", str(ckpt), *args, "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    info = sf.info(out)
    assert info.samplerate == 24000 and info.channels == 1
    assert info.frames % 1920 == 0 and 2 * 1920 <= info.frames <= 5 * 1920


def test_bench_engine_prints_its_json_report(
    tiny_checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import json

    out = tmp_path / "bench.json"
    args = [
        "bench-engine",
        "--model",
        str(tiny_checkpoints["custom_voice"]),
        "--streams",
        "3",
        "--frames",
        "12",
    ]
    assert main([*args, "--text-rate", "40", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    assert report["streams"] == 3 and report["frames_per_stream"] == 12 and report["device"] == "cpu"
    assert report["audio_s"] == pytest.approx(3 * 12 * 0.08)
    first, speed = report["first_chunk_ms"], report["speed_x_realtime"]
    assert 0 < first["p50"] <= first["p95"] <= first["p99"] <= first["max"]
    assert 0 < speed["min"] <= speed["p1"] <= speed["p5"] <= speed["p50"]  # speed's tail is the slow one
    assert report["aggregate_audio_s_per_s"] > 0 and report["wall_s"] > 0 and report["peak_memory_mb"] > 0
    trace = tmp_path / "trace.json"
    assert main([*args, "--text-rate", "0", "--warmup", "0", "--trace", str(trace)]) == 0  # all text at once
    traced = json.loads(capsys.readouterr().out)
    assert traced["text_rate_tokens_per_s"] == 0
    ops = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("name", "").startswith("aten::")]
    # The scheduler's thread (talker) and the decoder stage's both ran torch ops inside the trace.
    assert {"aten::embedding", "aten::conv1d"} <= {e["name"] for e in ops}
    assert len({e["tid"] for e in ops}) >= 2
    # The report's summary of the trace: both threads busy, a CPU run's trace has no GPU streams.
    threads = traced["trace"]["threads"]
    assert len(threads) >= 2 and all(t["busy_ms"] > 0 and t["top"] for t in threads[:2])
    assert 0 < threads[0]["busy_share"] <= 1 and "gpu" not in traced["trace"]
    assert report["engine"]["step_ms"]["count"] >= 12 and report["engine"]["decode_ms"]["count"] >= 3
    # A/B arms: the configured run and each arm's, a report per round, each arm's median.
    arm = "urgent_chunks.in_hand_s=0.5"
    assert main([*args, "--text-rate", "0", "--arm", arm, "--rounds", "2"]) == 0
    arms = json.loads(capsys.readouterr().out)["arms"]
    assert [(a["arm"], len(a["runs"])) for a in arms] == [("configured", 2), (arm, 2)]
    assert all(a["aggregate_audio_s_per_s_median"] > 0 for a in arms)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rounds", "2"], "--rounds goes with --arm"),
        (["--arm", "urgent_chunks.in_hand_s=x"], "takes a number"),
        (["--arm", "kv_length=64"], "SECTION.FIELD=VALUE"),
        (["--arm", "prefill_wait.max_s=0.01", "--rounds", "0"], "rounds must be at least 1, got 0"),
        (["--arm", "urgent_chunks.in_hand_s=1", "--trace", "t.json"], "does not go with --arm"),
    ],
)
def test_bench_engine_refuses_arms_it_cannot_run(
    tiny_checkpoints: dict[str, Path], flags: list[str], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert main(["bench-engine", "--model", str(tiny_checkpoints["custom_voice"]), *flags]) == 2
    assert "voicewire bench-engine: " in caplog.text and message in caplog.text


def _free_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def test_serve_without_the_default_model_names_the_ways_out(
    caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["serve", "--port", _free_port()]) == 2
    assert "--model PATH" in caplog.text and "--model tiny" in caplog.text


def test_serve_refuses_a_public_address_without_keys(caplog: pytest.LogCaptureFixture, monkeypatch) -> None:
    monkeypatch.delenv("VOICEWIRE_API_KEYS", raising=False)
    assert main(["serve", "--model", "tiny", "--host", "0.0.0.0", "--port", _free_port()]) == 2
    assert "refusing to serve on 0.0.0.0 without API keys" in caplog.text


def test_serve_on_a_busy_port_says_so_before_loading(caplog: pytest.LogCaptureFixture) -> None:
    import socket
    import time

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        assert main(["serve", "--model", "tiny", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in caplog.text
    assert "loaded" not in caplog.text and time.monotonic() - started < 5  # no model was loaded


def test_voices_add_list_rm_and_say_with_the_voice(
    tiny_models, tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.server.test_voices_api import REFERENCE, library_server
    from voicewire.engine import Engine, EngineConfig
    from voicewire.server.config import ServerConfig

    reference = tmp_path / "me.wav"
    reference.write_bytes(REFERENCE)
    with (
        Engine(tiny_models["base"], EngineConfig(max_streams=2, kv_length=96)) as engine,
        library_server(engine, tmp_path / "data", ServerConfig(api_keys=("k-1",))) as server,
    ):
        url = ["--url", server.url, "--api-key", "k-1"]  # ws:// is taken for http:// too
        assert main(["voices", *url, "add", str(reference), "--ref-text", "Hello there."]) == 0
        made = json.loads(capsys.readouterr().out)
        assert made["name"] == "me" and made["in_context"] and made["duration"] == 1.5
        assert main(["voices", *url, "list"]) == 0
        assert capsys.readouterr().out.split("\t")[:2] == [made["id"], "me"]
        out = tmp_path / "said.wav"
        assert main(["say", "Hi there.", "--voice", made["id"], *url, "--out", str(out)]) == 0
        assert sf.info(out).frames > 0
        assert main(["voices", *url, "rm", made["id"]]) == 0
        assert main(["voices", *url, "rm", made["id"]]) == 2
        assert "voice_not_found" in caplog.text
        assert main(["voices", "--url", server.http, "list"]) == 2  # no key
        assert "unauthorized" in caplog.text
    args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path / "lib")])
    assert args.data_dir == tmp_path / "lib"


def test_make_serves_auto_profile_is_the_cpu_one_here(caplog: pytest.LogCaptureFixture) -> None:
    """`make serve`'s `--config auto` on this machine (no GPU): the CPU profile, said in one line, and
    no network asked (the hub is only probed where a GPU could run the model)."""
    import logging
    import socket

    caplog.set_level(logging.INFO, logger="voicewire")
    with socket.socket() as holder:  # a busy port: serve stops before loading anything
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        assert main(["serve", "--config", "auto", "--port", str(holder.getsockname()[1])]) == 2
    assert "no CUDA GPU: serving the built-in tiny checkpoint (configs/cpu.yaml)" in caplog.text
    assert "Address already in use" in caplog.text


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (
            'engine:\n  model: tiny\nserver:\n  workers: "2"\n',
            "server setting workers should be a valid integer, got '2'",
        ),
        (
            "engine:\n  model: tiny\n  urgent_chunks:\n    bulk_rows: x\n",
            "engine setting urgent_chunks.bulk_rows should be a valid integer, got 'x'",
        ),
    ],
)
def test_serve_with_a_setting_of_the_wrong_type_names_it_and_exits_2(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, profile: str, message: str
) -> None:
    """Before, each made a traceback: a worker count of "2" in `range()`, and "x" < 0 in a check."""
    path = tmp_path / "profile.yaml"
    path.write_text(profile)
    assert main(["serve", "--config", str(path), "--port", _free_port()]) == 2
    assert f"voicewire serve: {message}" in caplog.text
