"""Which precision a run trains in: `mixed_precision=auto` resolved for the machine it runs on.

On CUDA, auto is bf16 (fp16 on GPUs without bf16), as before. On a CPU, auto is bf16 where the CPU multiplies bf16
natively (a matrix unit, Intel AMX-BF16, or AVX512-BF16's dot-product instructions: oneDNN then runs bf16 matmuls
several times faster than fp32 ones) and fp32 elsewhere, where bf16 would be emulated and slower."""

from __future__ import annotations

import torch

from ..environment import cpu_bf16_unit


def resolve_precision(setting: str, cuda: bool | None = None) -> str:
    """The precision Accelerate runs for a mixed_precision setting: "no", "bf16" or "fp16". auto: bf16 on a CUDA GPU
    with bf16 (else fp16), bf16 on a CPU with a native bf16 multiply, fp32 ("no") elsewhere; fp16 on a CPU: fp32
    (Accelerate runs fp16 on accelerators only; the header says so, presets.precision_words). cuda: whether the run
    trains on a GPU, None for this machine; a GPU elsewhere (a SLURM job's, asked from a node without one) is taken
    to have bf16, as every GPU since Ampere does (a SLURM GPU job is sent `bf16`, not `auto`: results.parallel)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if setting == "fp16" and not cuda:
        return "no"
    if setting != "auto":
        return setting
    if cuda:
        return "bf16" if not torch.cuda.is_available() or torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if cpu_bf16_unit() else "no"


def unit_words(used: str, cuda: bool | None = None) -> str:
    """What a bf16 run on a CPU multiplies with, for its header: " on AMX-BF16", " on AVX512-BF16", or a warning
    where the CPU has no such unit (an explicit mixed_precision=bf16: emulated, slower than fp32); "" otherwise."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if used != "bf16" or cuda:
        return ""
    unit = cpu_bf16_unit()
    return f" on {unit}" if unit else " on a CPU without a bf16 unit (emulated: slower than fp32)"


def build_accelerator(setting: str, **kwargs):
    """An Accelerator running mixed_precision `setting` resolved here. Accelerate keeps one state per process and
    refuses a second precision in it ("restart your runtime"); a process that trains runs of two precisions one
    after the other (a notebook, the report, the test suite: a cpu-profile run in bf16, a smoke run in fp32) clears
    that state first, as Accelerate's own test cases do between tests. A run's state is all built inside `train`,
    so nothing of an earlier run's is left to depend on it."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    wanted = resolve_precision(setting)
    held = AcceleratorState._shared_state.get("_mixed_precision")
    if held is not None and held != wanted:
        AcceleratorState._reset_state()
    # cpu=True lets several CPU processes (torchrun) form a gloo group; on GPUs Accelerate picks NCCL
    return Accelerator(mixed_precision=wanted, cpu=not torch.cuda.is_available(), **kwargs)
