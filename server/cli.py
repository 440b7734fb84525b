"""The `voicewire` command: serve, say (the client), voices (the voice library), synth (offline),
bench, bench-engine, bench-parts, make-checkpoint."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voicewire.server import voices_cli
from voicewire.server.config import LOG_FORMAT
from voicewire.server.metrics_dir import multiprocess_dir

log = logging.getLogger("voicewire")


def _synth(args: argparse.Namespace) -> int:
    import numpy as np
    import soundfile as sf

    from voicewire.engine.config import EngineConfig
    from voicewire.engine.kernels.choice import Kernels
    from voicewire.engine.model.qwen3_tts import Qwen3TTS
    from voicewire.engine.runtime.cpu_threads import use_cpu_threads
    from voicewire.engine.runtime.synthesis import SynthesisRequest, synthesize

    model = Qwen3TTS.load(args.model, device=args.device, dtype=args.dtype)
    use_cpu_threads(model.device, EngineConfig.cpu_threads)
    # The engine's draw kernel on CUDA, as before kernels were a value; no compiled pieces: one
    # offline synthesis would spend longer compiling them than it saves.
    model.use_kernels(Kernels.resolve(EngineConfig(fuse_kernels=False), model.device))
    if model.is_builtin_tiny:
        log.warning("model 'tiny' is a random checkpoint: it exercises the pipeline but does not speak words")
    ref_audio = None
    if args.ref_audio is not None:
        ref_audio = sf.read(args.ref_audio, dtype="float32", always_2d=False)
    speaker_embedding = np.load(args.speaker_embedding) if args.speaker_embedding else None
    request = SynthesisRequest(
        text=args.text,
        speaker=args.speaker,
        language=args.language,
        instruct=args.instruct,
        ref_audio=ref_audio,
        ref_text=args.ref_text,
        speaker_embedding=speaker_embedding,
        layout=args.layout,
        greedy=args.greedy,
        seed=args.seed,
        max_frames=args.max_frames,
    )
    result = synthesize(model, request)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(args.out, result.audio, result.sample_rate, subtype="PCM_16")
    if args.codes_out is not None:
        np.save(args.codes_out, result.codes)
    log.info(
        "wrote %s: %d frames, %.2f s of audio",
        args.out,
        result.codes.shape[0],
        len(result.audio) / result.sample_rate,
    )
    return 0


def _make_checkpoint(args: argparse.Namespace) -> int:
    from voicewire.engine.model.random_checkpoint import make_checkpoint

    make_checkpoint(args.dir, args.variant, args.size, seed=args.seed)
    log.info("wrote %s checkpoint (%s) to %s", args.variant, args.size, args.dir)
    return 0


DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
# `serve --config auto` (what `make serve` runs): the GPU profile with DEFAULT_MODEL where it can
# run, else the CPU profile with the built-in tiny checkpoint.
AUTO_PROFILE = Path("auto")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def choose_profile(cuda: bool, hub: bool) -> tuple[Path, str]:
    """The profile a first run serves, given whether a CUDA GPU is usable and DEFAULT_MODEL is in
    reach (cached, or on the hub), and why, as one line for the console."""
    if cuda and hub:
        return CONFIGS / "gpu.yaml", (
            f"a CUDA GPU and {DEFAULT_MODEL} in reach: serving it with configs/gpu.yaml "
            "(a first run downloads it into the Hugging Face cache)"
        )
    missing = "no CUDA GPU" if not cuda else f"{DEFAULT_MODEL} is neither cached nor reachable on the hub"
    return CONFIGS / "cpu.yaml", (
        f"{missing}: serving the built-in tiny checkpoint (configs/cpu.yaml); its random weights make "
        "noise, not words"
    )


def _model_in_reach(repo: str) -> bool:
    from huggingface_hub import HfApi, snapshot_download

    # Whatever stops either (no cache entry, offline mode, no route, a proxy's refusal) means the
    # same here: not in reach, so serve the tiny checkpoint rather than fail a first run.
    try:
        snapshot_download(repo_id=repo, local_files_only=True)
        return True
    except Exception:
        pass
    try:
        HfApi().model_info(repo, timeout=5)
        return True
    except Exception:
        return False


def resolve_auto_profile(config: Path | None) -> Path | None:
    """`--config auto` made a profile's path (and said why); any other value as it is."""
    if config != AUTO_PROFILE:
        return config
    import torch

    cuda = torch.cuda.is_available()
    profile, why = choose_profile(cuda, cuda and _model_in_reach(DEFAULT_MODEL))  # no network without a GPU
    log.info("%s", why)
    return profile


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from voicewire.engine import EngineConfig
    from voicewire.engine.runtime.engine_process import EngineProcess, RestartPolicy
    from voicewire.server.config import ServerConfig, uvicorn_options
    from voicewire.server.worker import (
        WORKER_APP,
        can_balance_connections,
        serve_workers,
        serving_app,
        stop_this_process,
        worker_environment,
    )

    args.config = resolve_auto_profile(args.config)
    overrides = {"model": args.model, "device": args.device, "dtype": args.dtype, "backend": args.backend}
    if args.config:
        engine_config = EngineConfig.from_yaml(args.config, **overrides)
    else:
        engine_config = EngineConfig.from_dict(
            {k: v for k, v in overrides.items() if v is not None} | {"model": args.model or DEFAULT_MODEL}
        )
    server_config = ServerConfig.from_yaml(
        args.config, host=args.host, port=args.port, workers=args.workers, data_dir=args.data_dir
    )
    if not (server_config.api_keys or os.environ.get("VOICEWIRE_API_KEYS")) and not _is_loopback(
        server_config.host
    ):
        raise ValueError(
            f"refusing to serve on {server_config.host} without API keys: set server.api_keys in the config "
            "or VOICEWIRE_API_KEYS, or listen on 127.0.0.1"
        )
    _check_port(server_config.host, server_config.port)  # before minutes of loading and warm-up
    # The engine runs in a process of its own, so sockets and Opus never hold its interpreter.
    restarts = RestartPolicy(server_config.engine_restarts, server_config.engine_restart_window_s)
    engine = EngineProcess.start(engine_config, on_lost=stop_this_process, restarts=restarts)
    try:
        options: dict[str, Any] = {
            "host": server_config.host,
            "port": server_config.port,
            "log_level": "info",
        }
        options |= uvicorn_options(server_config)
        log.info(
            "serving ws://%s:%d/v1/stream with %d worker(s)",
            server_config.host,
            server_config.port,
            server_config.workers,
        )
        with _stopped_by_signal():
            if server_config.workers == 1:
                uvicorn.run(serving_app(engine, server_config), **options)
            else:
                os.environ.update(worker_environment(engine, server_config))
                if can_balance_connections():
                    serve_workers(options, server_config.workers)
                else:
                    uvicorn.run(WORKER_APP, factory=True, workers=server_config.workers, **options)
        if engine.exited:  # it stopped because its engine did: say so to the supervisor
            log.error("the server stopped because its engine process exited")
            return 1
    finally:
        engine.close()
    return 0


def _check_port(host: str, port: int) -> None:
    """Raises ValueError when `host:port` cannot be listened on (another server holds it)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise ValueError(f"cannot listen on {host}: {exc.strerror}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port whose last connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ValueError(
                f"cannot listen on {host}:{port}: {exc.strerror} (another server? --port picks another)"
            ) from None


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


@contextlib.contextmanager
def _stopped_by_signal() -> Iterator[None]:
    """uvicorn stops gracefully on SIGTERM or SIGINT (Ctrl-C), then raises the signal again for
    the handler it found. The default ones would kill the process or raise KeyboardInterrupt
    there, before the engine process is closed and the metrics folder removed; this returns to
    the caller instead."""
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, _raise_stop) for signum in stops}
    try:
        yield
    except _Stop as stop:
        log.info("stopped by %s", stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say(args: argparse.Namespace) -> int:
    import asyncio
    import shutil
    import subprocess
    import tempfile

    import numpy as np
    import soundfile as sf
    from websockets.exceptions import WebSocketException

    from voicewire.client import Client, ServerError, ws_url

    if not args.out and not args.play:
        raise ValueError("say needs --out FILE.wav or --play")
    if args.voice and (args.speaker or args.instruct):
        raise ValueError("--voice names a whole voice: give it without --speaker or --instruct")
    args.url = ws_url(args.url)  # a one-line error for an address that is not one
    if not (args.speaker or args.voice or args.instruct):
        args.speaker = _first_speaker(args)
    voice = {"speaker": args.speaker, "language": args.language, "id": args.voice}
    if args.instruct:
        voice["instruct"] = args.instruct

    async def speak() -> tuple[np.ndarray, int, dict]:
        client = await Client.connect(
            args.url,
            api_key=args.api_key or os.environ.get("VOICEWIRE_API_KEY"),
            voice={k: v for k, v in voice.items() if v is not None},
            format={"encoding": "opus", "sample_rate": args.sample_rate},
        )
        async with client:
            context = client.context()
            # --stream-text sends the text a word at a time, as an LLM would write it.
            words = args.text.split(" ")
            pieces = [w + " " for w in words[:-1]] + [words[-1]] if args.stream_text else [args.text]

            async def feed() -> None:
                for piece in pieces:
                    await context.push(piece)
                    if args.stream_text:
                        await asyncio.sleep(1 / args.words_per_second)
                await context.end()

            audio, _ = await asyncio.gather(context.read_all(), feed())
            return audio, client.sample_rate, context.done or {}

    try:
        audio, rate, done = asyncio.run(speak())
    except ServerError as exc:
        raise ValueError(f"the server refused: {exc}") from None
    except (OSError, WebSocketException) as exc:
        raise ValueError(f"could not reach {args.url}: {exc}") from None
    log.info("%d samples at %d Hz (%s)", audio.shape[0], rate, done.get("reason", "?"))
    if args.out:
        sf.write(args.out, audio, rate, subtype="PCM_16")
        log.info("wrote %s", args.out)
    if args.play:
        player = next((p for p in ("ffplay", "aplay", "paplay", "afplay") if shutil.which(p)), None)
        if player is None:
            raise ValueError("--play needs ffplay, aplay, paplay or afplay on the PATH")
        with tempfile.NamedTemporaryFile(suffix=".wav") as f:
            sf.write(f.name, audio, rate, subtype="PCM_16")
            extra = ["-autoexit", "-nodisp", "-loglevel", "quiet"] if player == "ffplay" else []
            subprocess.run([player, *extra, f.name], check=True)
    return 0


def _first_speaker(args: argparse.Namespace) -> str | None:
    """The checkpoint's first named speaker, for a `say` that names no voice (None when it has
    none: the server then says what the checkpoint needs)."""
    listed = voices_cli.request(args, "GET", "/v1/voices")
    speakers = [voice["id"] for voice in listed.get("voices", [])]
    if not speakers:
        return None
    log.info("speaking as %s, the checkpoint's first speaker (--speaker picks another)", speakers[0])
    return str(speakers[0])


def _chunk_schedule(text: str) -> tuple[int, ...]:
    """`--chunks`: comma-separated frame counts, checked before any server starts."""
    from voicewire.bench.service import check_chunks

    try:
        chunks = tuple(int(n) for n in text.split(","))
        check_chunks(chunks)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected frame counts like 1,2,4,8 ({exc})") from None
    return chunks


def _bench(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from voicewire.bench.service import (
        Load,
        bench_level,
        check_cancel_every,
        default_client_processes,
        first_speaker,
        markdown,
        plot,
    )

    levels = [int(n) for n in args.streams.split(",")]
    if args.client_processes is not None and args.client_processes < 1:
        raise ValueError("--client-processes must be at least 1")
    check_cancel_every(args.cancel_every, "--cancel-every")  # before any engine loads
    server = engine = None
    url = args.url
    if url is None:  # serve in this process, on loopback
        import torch

        from voicewire.engine import Engine
        from voicewire.engine.runtime.gc_pauses import freeze_startup_heap
        from voicewire.server.app import BackgroundServer, create_app
        from voicewire.server.config import ServerConfig

        config = _bench_config(args, max(levels))
        engine = Engine.from_config(config)
        server_config = ServerConfig(max_sessions=max(levels) + 8, max_sessions_per_key=max(levels) + 8)
        server = BackgroundServer(create_app(engine, server_config))
        url = f"ws://127.0.0.1:{server.start()}"
        freeze_startup_heap()  # as each process of `voicewire serve` does
    try:
        load = Load(
            url,
            args.frames,
            args.text_rate,
            first_speaker(url),
            args.sessions_per_stream,
            args.chunks,
            args.cancel_every,
        )
        results = []
        for n in levels:
            processes = args.client_processes or default_client_processes(n)
            results.append(asyncio.run(bench_level(load, n, processes)))
        device = "remote"
        if engine is not None:
            device = str(engine.model.device)
            if engine.model.device.type == "cuda":
                device = f"{device} ({torch.cuda.get_device_name(engine.model.device)})"
        report = {
            "url": url,
            "device": device,
            "model": str(engine.model.folder) if engine is not None else "remote",
            "frames_per_stream": args.frames,
            "text_rate_words_per_s": args.text_rate,
            "sessions_per_stream": args.sessions_per_stream,
            "chunks": list(args.chunks) if args.chunks else None,
            "cancel_every": args.cancel_every,
            "levels": results,
        }
        if engine is not None and engine.model.device.type == "cuda":
            report["peak_gpu_memory_mb"] = round(
                torch.cuda.max_memory_allocated(engine.model.device) / 2**20, 1
            )
    finally:
        if server is not None:
            server.stop()
        if engine is not None:
            engine.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(report))
    if args.plot:
        plot(report, str(args.plot))
    return 0


def _bench_engine(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from voicewire.bench.engine import BenchSettings, parse_arms, run_arms, run_bench, torch_trace
    from voicewire.engine.model.qwen3_tts import Qwen3TTS
    from voicewire.engine.runtime.engine import Engine
    from voicewire.engine.runtime.gc_pauses import freeze_startup_heap

    config = _bench_config(args, max(args.streams, 1), args.variant)
    if args.arm:
        if args.trace is not None:
            raise ValueError("--trace traces one run; it does not go with --arm")
        parse_arms(args.arm, args.rounds, config)  # refused before the model loads
    elif args.rounds != 1:
        raise ValueError("--rounds goes with --arm")
    settings = BenchSettings(  # checked before the model loads too
        streams=args.streams,
        frames=args.frames,
        text_rate=args.text_rate,
        sessions_per_stream=args.sessions_per_stream,
        stagger_s=args.stagger,
    )
    model = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)

    async def bench() -> dict:
        with Engine(model, config) as engine:
            if args.warmup:  # first calls pay one-time costs (allocator, kernels)
                await run_bench(engine, BenchSettings(streams=1, frames=args.warmup, text_rate=0))
            freeze_startup_heap()  # as the engine's process of `voicewire serve` does
            if args.arm:
                return await run_arms(engine, settings, args.arm, args.rounds)
            if args.trace is None:
                return await run_bench(engine, settings)
            with torch_trace(args.trace):
                return await run_bench(engine, settings)

    report = asyncio.run(bench())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _bench_parts(args: argparse.Namespace) -> int:
    import json

    from voicewire.bench.parts import PartsSettings, bench_parts
    from voicewire.engine.model.qwen3_tts import Qwen3TTS

    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(n) for n in text.split(","))

    settings = PartsSettings(
        batches=numbers(args.batches),
        positions=numbers(args.positions),
        decoder_frames=numbers(args.decoder_frames),
        repeats=args.repeats,
        whole_kv=args.whole_kv,
        profile=args.profile,
    )
    config = _bench_config(args, max(settings.batches))
    model = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)
    text = json.dumps(bench_parts(model, config, settings), indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _add_bench_args(parser: argparse.ArgumentParser) -> None:
    """The model and output options both benchmarks share."""
    parser.add_argument(
        "--model", help="checkpoint folder, repo id or 'tiny' (default: a random one of --size)"
    )
    parser.add_argument(
        "--size", default="tiny", choices=["tiny", "0.6b", "1.7b"], help="random checkpoint size"
    )
    parser.add_argument("--config", type=Path, help="engine profile YAML (configs/*.yaml)")
    parser.add_argument("--frames", type=int, default=50, help="forced frames per stream (80 ms each)")
    parser.add_argument("--kv-length", type=int, help="talker KV positions per stream")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--eager", action="store_true", help="no CUDA graphs and no fused kernels (for comparison)"
    )
    parser.add_argument("--out", type=Path, help="also write the JSON report here")


def _bench_config(args: argparse.Namespace, max_streams: int, variant: str = "custom_voice"):
    """The engine config for a benchmark: its profile and flags, and a random checkpoint by default."""
    from voicewire.engine import EngineConfig
    from voicewire.engine.model.random_checkpoint import random_checkpoint

    overrides = {"device": args.device, "dtype": args.dtype, "max_streams": max_streams}
    overrides["model"] = args.model or str(random_checkpoint(variant, args.size))
    if args.kv_length:
        overrides["kv_length"] = args.kv_length
    if args.eager:
        overrides["cuda_graphs"] = overrides["fuse_kernels"] = False
    return (
        EngineConfig.from_yaml(args.config, **overrides) if args.config else EngineConfig.from_dict(overrides)
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voicewire", description="Real-time streaming TTS for Qwen3-TTS.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the streaming server (WebSocket /v1/stream)")
    serve.add_argument(
        "--model", help=f"checkpoint folder, Hugging Face repo id, or 'tiny' (default {DEFAULT_MODEL})"
    )
    serve.add_argument(
        "--config",
        type=Path,
        help="profile YAML with engine: and server: sections (configs/); 'auto': configs/gpu.yaml with "
        f"{DEFAULT_MODEL} where a CUDA GPU and the model are in reach, else configs/cpu.yaml (tiny)",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument(
        "--workers", type=int, help="processes serving sockets and Opus, sharing the engine (default 1)"
    )
    serve.add_argument("--device", help="cpu, cuda or cuda:N")
    serve.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    serve.add_argument(
        "--backend",
        choices=["torch", "vllm"],
        help="who runs the talker: torch (in process, default) or vllm",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        help="the voice library's folder (server.data_dir; default $VOICEWIRE_DATA_DIR, else the "
        "profile's, else ~/.local/share/voicewire)",
    )
    serve.set_defaults(func=_serve)

    say = sub.add_parser("say", help="speak text through a running server (the Python client)")
    say.add_argument("text")
    say.add_argument("--url", default="ws://127.0.0.1:8000", help="server address")
    say.add_argument("--api-key", help="API key (default: $VOICEWIRE_API_KEY)")
    say.add_argument("--speaker", help="named speaker (CustomVoice)")
    say.add_argument("--language", default="auto")
    say.add_argument("--instruct", help="voice description (VoiceDesign)")
    say.add_argument("--voice", help="a stored voice's id (voicewire voices add; Base checkpoints)")
    say.add_argument(
        "--stream-text", action="store_true", help="send the text a word at a time, as an LLM would"
    )
    say.add_argument("--words-per-second", type=float, default=8.0)
    say.add_argument("--sample-rate", type=int, default=24000, choices=[24000, 48000])
    say.add_argument("--out", type=Path, help="write a WAV file")
    say.add_argument("--play", action="store_true", help="play it (ffplay, aplay, paplay or afplay)")
    say.set_defaults(func=_say)

    synth = sub.add_parser("synth", help="synthesize one utterance to a WAV file")
    synth.add_argument("--model", required=True, help="checkpoint folder, Hugging Face repo id, or 'tiny'")
    synth.add_argument("--text", required=True)
    synth.add_argument("--speaker", help="named speaker (CustomVoice checkpoints)")
    synth.add_argument("--language", default="auto", help="language name as in config.json, or 'auto'")
    synth.add_argument("--instruct", help="style instruction (VoiceDesign, CustomVoice 1.7B)")
    synth.add_argument("--ref-audio", type=Path, help="reference audio to clone (Base checkpoints)")
    synth.add_argument("--ref-text", help="transcript of --ref-audio: clones in context")
    synth.add_argument("--speaker-embedding", type=Path, help=".npy x-vector to use instead of --ref-audio")
    synth.add_argument(
        "--layout",
        choices=["non_streaming", "dual_track"],
        help="text layout (default: the official default for the checkpoint's variant)",
    )
    mode = synth.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="deterministic greedy decoding")
    mode.add_argument("--seed", type=int, help="seed for sampling")
    synth.add_argument("--max-frames", type=int, help="cap on generated frames (EOS may stop earlier)")
    synth.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    synth.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    synth.add_argument("--out", type=Path, required=True, help="output WAV (24 kHz mono)")
    synth.add_argument("--codes-out", type=Path, help="write the codes as .npy, shape [frames, 16]")
    synth.set_defaults(func=_synth)

    service = sub.add_parser(
        "bench", help="concurrent WebSocket sessions against a server; JSON and Markdown"
    )
    service.add_argument(
        "--url", help="a running server (ws://host:port); default: serve one in this process"
    )
    _add_bench_args(service)
    service.add_argument(
        "--streams", default="1,8", help="concurrency levels, comma-separated (e.g. 1,8,32,64,256)"
    )
    service.add_argument(
        "--text-rate", type=float, default=8.0, help="words per second per stream; 0 = all at once"
    )
    service.add_argument(
        "--client-processes",
        type=int,
        metavar="P",
        help="client processes per level, its streams spread round-robin over them, so that one Python "
        "process does not limit the measurement (default, per level: one per 64 streams, at most a "
        "quarter of the CPUs, so 1 for small levels; never more than the level's streams)",
    )
    service.add_argument(
        "--sessions-per-stream",
        type=int,
        default=1,
        metavar="K",
        help="sessions each stream runs back to back (default 1): with K > 1 the level keeps N sessions "
        "open at all times, as steady traffic does, and its start-up ramp and tail weigh 1/K as much",
    )
    service.add_argument(
        "--cancel-every",
        type=int,
        default=4,
        metavar="N",
        help="cancel every Nth session (counting each stream's sessions in turn) after its first 0.4 s "
        "of audio, to time cancels (default 4; 0: no cancels, every session runs to its end)",
    )
    service.add_argument(
        "--chunks",
        type=_chunk_schedule,
        metavar="N,N,...",
        help="the chunk schedule every session asks for, in frames: the first chunk, then the next ones "
        "(the last repeats), e.g. 1,2,2,4,8 (default: the server's)",
    )
    service.add_argument("--markdown", type=Path, help="write the Markdown table here")
    service.add_argument("--plot", type=Path, help="write a PNG of latency and throughput (needs matplotlib)")
    service.set_defaults(func=_bench)

    bench = sub.add_parser(
        "bench-engine", help="N concurrent streams through the in-process engine; JSON report"
    )
    _add_bench_args(bench)
    bench.add_argument("--variant", default="custom_voice", choices=["base", "custom_voice", "voice_design"])
    bench.add_argument("--streams", type=int, default=4, help="concurrent streams")
    bench.add_argument(
        "--text-rate", type=float, default=20.0, help="text tokens per second per stream; 0 = all at once"
    )
    bench.add_argument(
        "--sessions-per-stream",
        type=int,
        default=1,
        metavar="K",
        help="sessions each stream runs back to back (default 1), so new streams are admitted while "
        "others step, as in `voicewire bench --sessions-per-stream`",
    )
    bench.add_argument(
        "--stagger",
        type=float,
        default=0.0,
        metavar="S",
        help="start the streams spread evenly over S seconds (default 0: all at once), so that with "
        "--sessions-per-stream their sessions start and end out of step, as a service's do",
    )
    bench.add_argument("--warmup", type=int, default=4, help="frames of a warm-up stream first (0: none)")
    bench.add_argument(
        "--arm",
        action="append",
        metavar="SECTION.FIELD=VALUE[,...]",
        help="A/B on one engine: the run as configured, then with these live settings (chunks, "
        "urgent_chunks, prefill_wait; a list as 3/2/2/4/8); repeat for more arms. Arms take "
        "turns, --rounds times; a report per run and each arm's median",
    )
    bench.add_argument("--rounds", type=int, default=1, help="with --arm: times the arms take their turns")
    bench.add_argument(
        "--trace",
        type=Path,
        help="write a torch.profiler Chrome trace of the measured run here (every thread's ops, and the "
        "GPU's kernels on CUDA); open it in Perfetto",
    )
    bench.set_defaults(func=_bench_engine)

    parts = sub.add_parser(
        "bench-parts", help="the frame step, prefill and codec decoder timed alone; JSON report"
    )
    _add_bench_args(parts)
    parts.add_argument("--batches", default="1,8,64,128,256", help="stream batch sizes, comma-separated")
    parts.add_argument(
        "--positions", default="100", help="prompt rows before the timed steps (they set the attention span)"
    )
    parts.add_argument("--decoder-frames", default="1,2,4,8", help="frames per decode call")
    parts.add_argument("--repeats", type=int, default=20, help="calls timed per figure")
    parts.add_argument("--whole-kv", action="store_true", help="attend to the whole KV (spans off)")
    parts.add_argument("--profile", action="store_true", help="add the largest kernels (torch.profiler)")
    parts.set_defaults(func=_bench_parts)

    voices_cli.add_parser(sub)

    make = sub.add_parser("make-checkpoint", help="write a random checkpoint in the published layout")
    make.add_argument("dir", type=Path)
    make.add_argument("--variant", required=True, choices=["base", "custom_voice", "voice_design"])
    make.add_argument("--size", default="tiny", choices=["tiny", "0.6b", "1.7b"])
    make.add_argument("--seed", type=int, default=0)
    make.set_defaults(func=_make_checkpoint)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=LOG_FORMAT,
    )
    with contextlib.ExitStack() as stack:
        if args.command == "serve":
            # Its processes share one metrics folder, set before anything (voicewire.engine
            # included) imports prometheus-client: see server.metrics_dir.
            stack.enter_context(multiprocess_dir())
        from voicewire.engine.model.checkpoint import CheckpointError

        try:
            return args.func(args)
        except (CheckpointError, ValueError, FileNotFoundError) as exc:
            # User-facing failures: one clear line, no traceback.
            log.error("voicewire %s: %s", args.command, exc)
            return 2


if __name__ == "__main__":
    sys.exit(main())
