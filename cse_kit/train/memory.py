"""A run's peak memory: counted afresh when the run is set up (reset_peak_rss), read into its summary at the end
(peak_memory)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def reset_peak_rss() -> None:
    """Start the process's peak resident set size afresh (Linux >= 4.0: VmHWM), so that a run inside a longer
    process (a notebook, a test session) reports its own peak, not the largest of the runs before it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the peak is then the process's since it started
        pass


def _peak_rss_bytes() -> int | None:
    """The process's peak resident set size since reset_peak_rss (else since it started), or None where the OS
    does not report it."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    if sys.platform == "win32":
        return None
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def peak_memory(accelerator) -> dict:
    """The summary's peak memory, the largest over the processes (bytes, None where not measurable): the GPU memory
    tensors held since the run started or resumed (torch.cuda.max_memory_allocated; the caching allocator's reserve
    and the CUDA context that nvidia-smi adds are not in it) and the peak resident set size."""
    cuda = accelerator.device.type == "cuda"
    gpu = torch.cuda.max_memory_allocated(accelerator.device) if cuda else None
    rss = _peak_rss_bytes()
    unknown = -1  # a tensor holds no None
    peaks = torch.tensor([unknown if v is None else v for v in (gpu, rss)], device=accelerator.device)
    gpu, rss = (None if v == unknown else v for v in accelerator.reduce(peaks, reduction="max").tolist())
    return {"peak_gpu_memory_bytes": gpu, "peak_rss_bytes": rss}
