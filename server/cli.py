"""The `voicewire` command: its arguments, and a call into the module that runs each command: serve
(server.serving), say (server.say_cli), voices (server.voices_cli), synth (offline:
engine.runtime.synthesis), bench, bench-engine, bench-parts (voicewire.bench), make-checkpoint
(engine.model.random_checkpoint)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path

from voicewire.bench.model import BenchModel
from voicewire.server import serving, voices_cli
from voicewire.server.config import LOG_FORMAT
from voicewire.server.metrics_dir import multiprocess_dir
from voicewire.server.protocol import FormatSpec

log = logging.getLogger("voicewire")


def _serve(args: argparse.Namespace) -> int:
    engine_config, server_config = serving.load_configs(
        args.config,
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        backend=args.backend,
        host=args.host,
        port=args.port,
        workers=args.workers,
        data_dir=args.data_dir,
    )
    return serving.serve(engine_config, server_config)


def _say(args: argparse.Namespace) -> int:
    from voicewire.server.say_cli import say

    say(
        args.text,
        args.url,
        api_key=args.api_key,
        speaker=args.speaker,
        language=args.language,
        instruct=args.instruct,
        voice=args.voice,
        stream_text=args.stream_text,
        words_per_second=args.words_per_second,
        sample_rate=args.sample_rate,
        out=args.out,
        play=args.play,
    )
    return 0


def _synth(args: argparse.Namespace) -> int:
    import numpy as np
    import soundfile as sf

    from voicewire.engine.runtime.synthesis import SynthesisRequest, load_for_synthesis, synthesize_to_file

    model = load_for_synthesis(args.model, device=args.device, dtype=args.dtype)
    request = SynthesisRequest(
        text=args.text,
        speaker=args.speaker,
        language=args.language,
        instruct=args.instruct,
        ref_audio=sf.read(args.ref_audio, dtype="float32", always_2d=False) if args.ref_audio else None,
        ref_text=args.ref_text,
        speaker_embedding=np.load(args.speaker_embedding) if args.speaker_embedding else None,
        layout=args.layout,
        greedy=args.greedy,
        seed=args.seed,
        max_frames=args.max_frames,
    )
    synthesize_to_file(model, request, args.out, args.codes_out)
    return 0


def _make_checkpoint(args: argparse.Namespace) -> int:
    from voicewire.engine.model.random_checkpoint import make_checkpoint

    make_checkpoint(args.dir, args.variant, args.size, seed=args.seed)
    log.info("wrote %s checkpoint (%s) to %s", args.variant, args.size, args.dir)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from voicewire.bench.load import check_cancel_every
    from voicewire.bench.report import markdown, plot
    from voicewire.bench.service import bench_service

    levels = [int(n) for n in args.streams.split(",")]
    if args.client_processes is not None and args.client_processes < 1:
        raise ValueError("--client-processes must be at least 1")
    check_cancel_every(args.cancel_every, "--cancel-every")  # before any engine loads
    if not args.session_interval >= 0:  # NaN too
        raise ValueError(f"--session-interval must be 0 (back to back) or more, not {args.session_interval}")
    report = bench_service(
        levels,
        _bench_model(args),
        url=args.url,
        frames=args.frames,
        text_rate=args.text_rate,
        sessions_per_stream=args.sessions_per_stream,
        chunks=args.chunks,
        cancel_every=args.cancel_every,
        client_processes=args.client_processes,
        session_interval_s=args.session_interval,
        opus_complexity=args.opus_complexity,
    )
    _print_report(report, args.out)
    if args.markdown:
        args.markdown.write_text(markdown(report))
    if args.plot:
        plot(report, str(args.plot))
    return 0


def _bench_engine(args: argparse.Namespace) -> int:
    from voicewire.bench.engine import BenchSettings, bench_engine

    if args.arm:
        if args.trace is not None:
            raise ValueError("--trace traces one run; it does not go with --arm")
    elif args.rounds != 1:
        raise ValueError("--rounds goes with --arm")
    settings = BenchSettings(  # checked before the model loads
        streams=args.streams,
        frames=args.frames,
        text_rate=args.text_rate,
        sessions_per_stream=args.sessions_per_stream,
        stagger_s=args.stagger,
    )
    report = bench_engine(
        _bench_model(args),
        settings,
        variant=args.variant,
        warmup=args.warmup,
        arms=args.arm,
        rounds=args.rounds,
        trace=args.trace,
    )
    _print_report(report, args.out)
    return 0


def _bench_parts(args: argparse.Namespace) -> int:
    from voicewire.bench.parts import PartsSettings, bench_model_parts

    settings = PartsSettings(
        batches=_numbers(args.batches),
        positions=_numbers(args.positions),
        decoder_frames=_numbers(args.decoder_frames),
        repeats=args.repeats,
        whole_kv=args.whole_kv,
        profile=args.profile,
    )
    _print_report(bench_model_parts(_bench_model(args), settings), args.out)
    return 0


def _bench_model(args: argparse.Namespace) -> BenchModel:
    """The model flags every benchmark shares (`_add_bench_args`)."""
    return BenchModel(
        model=args.model,
        size=args.size,
        profile=args.config,
        device=args.device,
        dtype=args.dtype,
        kv_length=args.kv_length,
        eager=args.eager,
    )


def _print_report(report: dict, out: Path | None) -> None:
    """A benchmark's JSON report on stdout, and in `out` too when given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(","))


def _chunk_schedule(text: str) -> tuple[int, ...]:
    """`--chunks`: comma-separated frame counts, checked before any server starts."""
    from voicewire.bench.load import check_chunks

    try:
        chunks = tuple(int(n) for n in text.split(","))
        check_chunks(chunks)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected frame counts like 1,2,4,8 ({exc})") from None
    return chunks


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voicewire", description="Real-time streaming TTS for Qwen3-TTS.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the streaming server (WebSocket /v1/stream)")
    serve.add_argument(
        "--model",
        help=f"checkpoint folder, Hugging Face repo id, or 'tiny' (default {serving.DEFAULT_MODEL})",
    )
    serve.add_argument(
        "--config",
        type=Path,
        help="profile YAML with engine: and server: sections (configs/); 'auto': configs/gpu.yaml with "
        f"{serving.DEFAULT_MODEL} where a CUDA GPU and the model are in reach, else configs/cpu.yaml (tiny)",
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
        "--session-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="each stream starts a session every S seconds, its streams spread evenly over the first S "
        "(an open loop, as callers arrive; a session whose stream's one before is still open starts at "
        "its end and counts in sessions_late); default 0: back to back, each on the previous one's done",
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
    service.add_argument(
        "--opus-complexity",
        type=int,
        default=FormatSpec().complexity,
        choices=range(11),
        metavar="0-10",
        help="the Opus encoder complexity every session asks for (default %(default)s, the protocol's): a server's "
        "codec CPU per packet follows it (scripts/opus_cost.py)",
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
        "urgent_chunks, prefill_wait, first_chunk_alone; a list as 3/2/2/4/8); repeat for more arms. Arms take "
        "turns, --rounds times, every other round backwards; a report per run, each arm's median "
        "and its runs against the configured run of their round",
    )
    bench.add_argument("--rounds", type=int, default=1, help="with --arm: times the arms take their turns")
    bench.add_argument(
        "--trace",
        type=Path,
        help="write a torch.profiler Chrome trace of the measured run here (every thread's ops, and the "
        "GPU's kernels on CUDA), and add its summary to the report: each thread's and GPU stream's busy "
        "time, top ops and kernels, and the streams' idle gaps (bench/trace.py)",
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
