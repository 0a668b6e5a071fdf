"""What a result was computed with: recorded beside every number (the machine, the versions, the code)."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import platform
from pathlib import Path

import numpy as np
import torch

from . import __version__

PACKAGE = Path(__file__).resolve().parent


def describe(device: str | torch.device | None = None) -> dict:
    from importlib.metadata import version  # not importing transformers: a notebook reading records never needs it

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    env = {"cse_kit": __version__, "python": platform.python_version(), "torch": torch.__version__,
           "transformers": version("transformers"), "numpy": np.__version__, "scipy": version("scipy"),
           "device": str(device), "torch_threads": torch.get_num_threads(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "platform": platform.platform()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def source_digest(parts=(".",), leave_out=()) -> str:
    """Digest of the package's Python sources under parts (folders or files, relative to the package), but for the
    files in leave_out (relative to the package): each file's path and content."""
    digest = hashlib.sha256()
    skipped = {PACKAGE / path for path in leave_out}
    for part in parts:
        root = PACKAGE / part
        for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
            if path not in skipped:
                digest.update(str(path.relative_to(PACKAGE)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory in the process instead of returning it to the OS.

    By default glibc maps blocks over its mmap threshold afresh and trims the heap top above twice that, so a CPU
    training step that frees and reallocates hundreds of MB (DiffCSE: two vocabulary-sized embedding gradients,
    optimizer temporaries, three models' activations) page-faults about 170,000 times per step; with this, after
    the first steps, about none (bench/train_speed.py measures the speed, bench/malloc_faults.py the page faults
    of a simpler pattern). The cost: the process's resident memory does not shrink after its peak. Returns False where there is no glibc (macOS, Windows, musl)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 1 << 30))
