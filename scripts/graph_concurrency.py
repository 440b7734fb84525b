"""Talker step graphs (256 rows) and decoder graphs (128 rows x 8 frames) replayed at once on two
streams, as the engine runs them: with capture streams of their own, then sharing one (the build
before 690c1bf). Usage on a GPU: python scripts/graph_concurrency.py separate shared (PHASE_S=20)."""
import os, sys, threading, time
import torch
from voicewire.bench.model import BenchModel
from voicewire.engine.kernels.choice import Kernels
from voicewire.engine.model.qwen3_tts import Qwen3TTS
from voicewire.engine.runtime.decoder_batch import BatchedDecoder
from voicewire.engine.runtime.frame_step import FrameStepper, GenerationOptions

bm = BenchModel(size="0.6b", profile="configs/gpu.yaml", device="cuda", dtype="bfloat16")
config = bm.engine_config(256)
model = Qwen3TTS.load(config.model, device=config.device, dtype=config.dtype)
model.use_kernels(Kernels.resolve(config, model.device))
dev = model.device
PHASE_S = float(os.environ.get("PHASE_S", "20"))

def build(shared: bool):
    st = FrameStepper(model.talker, 256, config.kv_length, graphs=True, pad=True, max_prefills=64)
    st.buckets = [1, 256]
    st.prefill_buckets = {span: (sorted({1, st.prefill_batches[span]}), [32]) for span in st.prefill_spans}
    st.capture()
    opts = GenerationOptions.from_generation_config(model.generation_config, suppress_eos=True)
    for s in range(256): st.configure(s, opts, seed=s)
    dec = BatchedDecoder(model.decoder, 128, graphs=True)
    dec.buckets = [1, 128]
    if shared:
        dec.capture_stream = st.capture_stream
    dec.capture()
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(20, model.talker.cfg.decoder.hidden_size, generator=g).to(dev, model.dtype)
    st.prefill([(s, rows, 0) for s in range(256)])
    return st, dec

def phase(name, shared):
    t0 = time.monotonic()
    st, dec = build(shared)
    print(f"{name}: built in {time.monotonic()-t0:.1f} s", flush=True)
    codes = torch.randint(0, 2048, (128, 8, 16))
    stop = time.monotonic() + PHASE_S
    counts = {"step": 0, "dec": 0, "step_max": 0.0, "dec_max": 0.0}
    def decoder_loop():
        s = torch.cuda.Stream(dev, priority=-2)
        with torch.cuda.stream(s), torch.inference_mode():
            while time.monotonic() < stop:
                a = time.monotonic(); dec.decode(list(range(128)), codes)
                counts["dec"] += 1; counts["dec_max"] = max(counts["dec_max"], time.monotonic() - a)
    def monitor():
        while time.monotonic() < stop + 5:
            time.sleep(2); print(f"  {name} {time.monotonic()-stop+PHASE_S:5.1f}s {counts}", flush=True)
    th = threading.Thread(target=decoder_loop, daemon=True); th.start()
    threading.Thread(target=monitor, daemon=True).start()
    text = model.text_ids.tts_pad
    s = torch.cuda.Stream(dev, priority=-1)
    with torch.cuda.stream(s), torch.inference_mode():
        while time.monotonic() < stop:
            a = time.monotonic(); st.step(256, [True] * 256, [text] * 256).cpu()
            counts["step"] += 1; counts["step_max"] = max(counts["step_max"], time.monotonic() - a)
    th.join()
    print(f"{name}: done {counts}", flush=True)

for name in sys.argv[1:]:
    phase(name, name == "shared")
