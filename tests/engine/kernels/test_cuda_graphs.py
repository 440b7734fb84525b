import gc

import numpy as np
import pytest
import torch

from voicewire.engine.kernels import cuda_graphs

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def test_put_bytes_copies_every_byte_into_place() -> None:
    dst = np.full(6, -1, dtype=np.int64)
    src = np.arange(6, dtype=np.int64)
    cuda_graphs.put_bytes(dst[:4], src[2:])
    assert dst.tolist() == [2, 3, 4, 5, -1, -1]
    cuda_graphs.put_bytes(dst[4:], bytes(16))
    assert dst.tolist() == [2, 3, 4, 5, 0, 0]


def test_host_tensors_stay_as_they_are_for_the_cpu() -> None:
    host = torch.arange(4)
    assert cuda_graphs.pinned(host, torch.device("cpu")) is host
    assert cuda_graphs.to_device(host, torch.device("cpu")) is host


@cuda
def test_each_component_captures_on_a_stream_of_its_own() -> None:
    device = torch.device("cuda")
    live = []
    with pytest.raises(RuntimeError, match="every pooled CUDA stream"):
        for _ in range(cuda_graphs.STREAM_POOL + 1):
            live.append(cuda_graphs.GraphCapture(device))
    assert len(live) > 1  # (fewer than the pool's 32 where another test's components are alive)
    assert len({capture.stream.cuda_stream for capture in live}) == len(live)
    freed = live.pop().stream.cuda_stream
    gc.collect()
    assert cuda_graphs.GraphCapture(device).stream.cuda_stream == freed  # a dead one's is free again


@cuda
def test_graphs_of_two_components_replayed_at_once_give_their_eager_results() -> None:
    """Two GEMMs of a shape cuBLAS splits over k (it keeps partial sums in its workspace), each
    captured by its own component and replayed at the same time on two streams, as the talker's
    and the decoder's graphs are. Sharing one capture stream, they would share one workspace."""
    device = torch.device("cuda")
    generator = torch.Generator(device).manual_seed(0)
    pairs = [
        (
            torch.randn(64, 1 << 16, device=device, dtype=torch.bfloat16, generator=generator),
            torch.randn(1 << 16, 64, device=device, dtype=torch.bfloat16, generator=generator),
        )
        for _ in range(2)
    ]
    outputs = [torch.empty(64, 64, device=device, dtype=torch.bfloat16) for _ in pairs]
    captures = [cuda_graphs.GraphCapture(device) for _ in pairs]  # alive, as the engine's components
    graphs = [
        capture(lambda a=a, b=b, out=out: torch.mm(a, b, out=out))
        for capture, (a, b), out in zip(captures, pairs, outputs, strict=True)
    ]
    expected = [torch.mm(a, b) for a, b in pairs]
    # Replayed as the engine does: the talker's and the decoder's streams have priorities -1 and -2.
    replay_streams = [torch.cuda.Stream(device, priority=-1 - i) for i in range(len(graphs))]
    for _ in range(200):
        for graph, stream in zip(graphs, replay_streams, strict=True):
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                graph.replay()
        for stream in replay_streams:
            torch.cuda.current_stream(device).wait_stream(stream)
        for out, want in zip(outputs, expected, strict=True):
            torch.testing.assert_close(out, want)
