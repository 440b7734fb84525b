"""How many threads torch splits one CPU op over, for an engine that runs on the CPU.

The engine's ops are small (one frame of a few streams), and it runs two torch threads of its own
(the talker and the decoder) beside the server's event loop and encoders. Split over OpenMP
threads, every op ends at a barrier that waits for a thread the OS has descheduled: on a 2-core
machine with a browser beside the server, the tiny checkpoint ran at 0.25-0.4x real time with
torch's default of one thread per core, and at 1.6-2.4x with one thread. A big checkpoint on a
many-core host may want more: `engine.cpu_threads` sets it.
"""

import logging

import torch

log = logging.getLogger(__name__)


def use_cpu_threads(device: torch.device, threads: int) -> None:
    """Set torch's intra-op threads for a model on `device` (process-wide; a no-op on CUDA)."""
    if device.type != "cpu" or torch.get_num_threads() == threads:
        return
    log.info("torch splits each CPU op over %d thread(s) (engine.cpu_threads)", threads)
    torch.set_num_threads(threads)
