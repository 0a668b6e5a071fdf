"""Repeating a run exactly (TrainConfig.deterministic): built so that the same seed gives the same numbers twice on
one GPU. Built and tested on CPU; on a GPU to be measured with `bench/gpu_check.sh --device cuda` (its two
deterministic runs), which no GPU has run yet.

A CPU run repeats to the last bit already (the kit's tests check bit-exact resume). On CUDA two runs of one seed
differ in the last digits of their losses and dev scores, because some kernels sum in an order that depends on
thread timing (atomic adds in backward passes), cuBLAS may split a product differently with more than one
workspace, and cuDNN may pick another algorithm by benchmarking. deterministic=true turns that off for the run:

- torch.use_deterministic_algorithms(True), with warn_only=False: an operation torch has no deterministic
  implementation of stops the run (nondeterministic_operations_named says which, in one line) rather than letting
  it go on and record deterministic=true beside numbers that do not repeat;
- CUBLAS_WORKSPACE_CONFIG=:4096:8, which cuBLAS reads when PyTorch first uses it in the process (its workspace is
  then sized once): set before that, or the process's cuBLAS keeps the workspace it started with, said in a warning
  with the fix (set the variable before starting Python);
- cuDNN without benchmarking, and its deterministic algorithms.

deterministic_mode() is the context manager the loop holds around the run (its set-up, training steps and dev
evaluations): torch's refusal of an operation is said there in one line (nondeterministic_operations_named), and at
exit what the process had before is put back (a notebook trains many runs in one process, and the next one's setting
is its own). With deterministic=false it changes nothing: torch stays as the process set it."""

from __future__ import annotations

import contextlib
import os
import re
import warnings

import torch

#: the environment variable cuBLAS sizes its workspace by, and the setting that makes its products repeat (NVIDIA's
#: cuBLAS documentation, "Results reproducibility"; :16:8 is the other, smaller one torch accepts)
CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_SETTING = ":4096:8"
DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")

#: what torch says of an operation without a deterministic implementation: "<op> does not have a deterministic
#: implementation, but you set 'torch.use_deterministic_algorithms(True)'. ..."
_NO_IMPLEMENTATION = re.compile(r"(\S+) does not have a deterministic implementation")

#: whether this process set CUBLAS_WORKSPACE_CONFIG before its cuBLAS started (its workspace is then sized by it)
_cublas_sized_here = False


class NondeterministicOperation(ValueError):
    """A run with deterministic=true reached an operation torch has no deterministic implementation of (one line:
    the method, the operation and the fix)."""


def state() -> dict:
    """The process's settings that deterministic_mode changes, as they are now."""
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            CUBLAS_ENV: os.environ.get(CUBLAS_ENV)}


def _restore(saved: dict) -> None:
    torch.use_deterministic_algorithms(saved["deterministic_algorithms"], warn_only=saved["warn_only"])
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = saved["cudnn_deterministic"]
    if saved[CUBLAS_ENV] is None:
        os.environ.pop(CUBLAS_ENV, None)
    else:
        os.environ[CUBLAS_ENV] = saved[CUBLAS_ENV]


def gpu_used() -> bool:
    """Whether this process has put anything on a GPU yet (so its cuBLAS may have started and sized its workspace).
    Initialising CUDA alone does not start cuBLAS (`torch.cuda.is_bf16_supported()`, which resolving
    mixed_precision asks, initialises it); a matrix product needs tensors on the GPU, which its allocator counts."""
    if not torch.cuda.is_initialized():
        return False
    try:
        return any(torch.cuda.memory_stats(d).get("allocation.all.allocated", 0)
                   for d in range(torch.cuda.device_count()))
    except (RuntimeError, AssertionError):  # no statistics: assume the worst
        return True


def late_cublas_warning() -> str:
    return (f"deterministic=true sets {CUBLAS_ENV}={CUBLAS_SETTING}, but this process used the GPU before, so cuBLAS "
            "may keep the workspace it started with and matrix products may still differ run to run: set the "
            f"variable before starting Python (`{CUBLAS_ENV}={CUBLAS_SETTING} cse-kit train ...`, or in the "
            "environment of the notebook's kernel)")


@contextlib.contextmanager
def deterministic_mode(enabled: bool, method: str | None = None):
    """The block (a run) with torch's deterministic algorithms (warn_only=False), CUBLAS_WORKSPACE_CONFIG=:4096:8
    (kept where it is :16:8 already) and cuDNN deterministic without benchmarking, where `enabled`; what the process
    had before is put back at exit. An operation torch refuses in the block is said in one line naming `method`
    (nondeterministic_operations_named). Not enabled: nothing changes. Entered before the run's first CUDA work."""
    global _cublas_sized_here
    if not enabled:
        yield
        return
    saved = state()
    first_gpu_use = False  # whether cuBLAS may start in this block, under the setting
    if os.environ.get(CUBLAS_ENV) not in DETERMINISTIC_CUBLAS:
        first_gpu_use = not gpu_used()
        if not first_gpu_use and not _cublas_sized_here:  # (an earlier run that set it first: sized by it)
            warnings.warn(late_cublas_warning(), stacklevel=3)
        os.environ[CUBLAS_ENV] = CUBLAS_SETTING
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    try:
        with nondeterministic_operations_named(method) if method else contextlib.nullcontext():
            yield
    finally:
        _cublas_sized_here = _cublas_sized_here or (first_gpu_use and gpu_used())
        _restore(saved)


def nondeterministic_error_line(method: str, message: str) -> str | None:
    """The one line a run of `method` with deterministic=true stops with, for torch's RuntimeError `message`; None
    where the message is not torch refusing a nondeterministic operation."""
    found = _NO_IMPLEMENTATION.search(message)
    if found:
        operation = found.group(1).rstrip(":,.")
        return (f"method {method} calls {operation}, which torch has no deterministic implementation of, and this run "
                f"sets deterministic=true: set deterministic=false (--set deterministic=false; the run's numbers then "
                f"may differ in their last digits run to run), or compute that step in the method with operations "
                f"torch runs deterministically (torch.use_deterministic_algorithms' documentation lists them)")
    if CUBLAS_ENV in message and "deterministic" in message.lower():  # the variable was unset during the run
        return (f"method {method} multiplies matrices with cuBLAS, and deterministic=true needs {CUBLAS_ENV}="
                f"{CUBLAS_SETTING}, which was unset while the run trained: set it before starting Python "
                f"(`{CUBLAS_ENV}={CUBLAS_SETTING} cse-kit train ...`), or set deterministic=false")
    return None


@contextlib.contextmanager
def nondeterministic_operations_named(method: str):
    """The block (a run's training steps and dev evaluations) with torch's refusal of a nondeterministic operation
    (a RuntimeError, under deterministic mode) said in one line naming the method, the operation and the fix:
    NondeterministicOperation, a ValueError (the CLI prints it as its error line). Any other error passes as it is."""
    try:
        yield
    except RuntimeError as error:
        line = nondeterministic_error_line(method, str(error))
        if line is None:
            raise
        raise NondeterministicOperation(line) from error
