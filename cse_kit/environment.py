"""What a result was computed with: recorded beside every number (the machine, the versions, the code)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import os
import platform
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import __version__

PACKAGE = Path(__file__).resolve().parent


#: The libraries whose versions decide the kit's numbers: every record's environment names each installed one, and a
#: record computed under another major.minor than the running one is marked stale wherever it is shown.
NUMBER_LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate", "numpy", "scipy", "scikit-learn", "mteb")


#: `1` loads every model the kit loads with transformers' Hub kernels (the `kernels` package's modules in place of
#: GELU, attention and others, on a GPU); unset or `0`, they are off: the kit computes with the papers' modules, as its
#: references were computed (transformers 5.25 turns them on unless told, and fails without the `kernels` package).
#: Every record's environment says which (`hub_kernels`), and the doctor names it where it differs.
HUB_KERNELS_ENV = "CSE_KIT_HUB_KERNELS"


def hub_kernels() -> bool:
    """Whether $CSE_KIT_HUB_KERNELS turns Hub kernels on; a ValueError naming the values for anything else."""
    text = os.environ.get(HUB_KERNELS_ENV, "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{HUB_KERNELS_ENV}={text!r}: set it to 1 (Hub kernels on, for speed) or 0 (off, the papers' "
                     "modules: the default), or unset it")


def kernel_loading() -> dict:
    """from_pretrained's keyword for Hub kernels, said every time (transformers 5.0 to 5.24 leave them off unless
    told, 5.25 on)."""
    return {"use_kernels": hub_kernels()}


def library_versions() -> dict[str, str]:
    """{library: version} of the NUMBER_LIBRARIES installed here (read from their metadata: nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in NUMBER_LIBRARIES:
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def describe(device: str | torch.device | None = None) -> dict:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    env = {"cse_kit": __version__, "python": platform.python_version(), **describe_versions(),
           "device": str(device), "torch_threads": torch.get_num_threads(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "platform": platform.platform(),
           # torch's deterministic algorithms, on for a run with deterministic=true (cse_kit.train.determinism)
           "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(), "hub_kernels": hub_kernels()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")  # None: cuBLAS's default
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_model"] = cpu_model()
        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # ATen's SIMD kernels: AVX512, AVX2, ...
        env["cpu_bf16"] = cpu_bf16_unit()  # the unit that multiplies bf16 natively, or None
        if env["cpu_bf16"] != detected_bf16_unit():  # $CSE_KIT_CPU_UNIT's emulated CPU class: said with the numbers
            env["cpu_bf16_detected"] = detected_bf16_unit()
    return env


@lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo's `model name`), or None where it is not said."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                return value.strip()
    return None


def major_minor(version: str) -> str:
    """'4.57.1' -> '4.57', '2.13.0+cpu' -> '2.13'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def stale_versions(recorded: dict, current: dict | None = None) -> list[str]:
    """What makes a record's numbers another environment's: each NUMBER_LIBRARY whose major.minor in the record's
    environment (`recorded`) differs from this one's, as "computed with transformers 4.57; this environment has 5.1".
    A library the record does not name (a record of an older release) or this environment lacks is not compared."""
    current = current if current is not None else describe_versions()
    return [f"computed with {name} {major_minor(recorded[name])}; this environment has {major_minor(current[name])}"
            for name in NUMBER_LIBRARIES if recorded.get(name) and current.get(name)
            and major_minor(recorded[name]) != major_minor(current[name])]


@lru_cache(maxsize=1)
def describe_versions() -> dict[str, str]:
    """This process's NUMBER_LIBRARIES versions, read once (torch as it says itself, with its build: 2.13.0+cpu)."""
    return {**library_versions(), "torch": torch.__version__}


#: /proc/cpuinfo flags of a native bf16 multiply, the fastest first, with the name a run's header and record give it.
BF16_UNITS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of /proc/cpuinfo's text (x86 `flags`, Arm `Features`)."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


#: names the bf16 unit instead of /proc/cpuinfo (docs/install.md, "CPU classes"): AMX-BF16, AVX512-BF16 or none. Naming
#: a unit the CPU lacks is a test override (the kit resolves `auto` and names records as that CPU class would while
#: oneDNN runs what this CPU has; the records say so, cpu_bf16_detected); naming a lesser one narrows what is real.
CPU_UNIT_ENV = "CSE_KIT_CPU_UNIT"
NO_UNIT = "none"

#: ONEDNN_MAX_CPU_ISA (oneDNN's instruction-set limit) -> the best bf16 unit oneDNN runs under it; below AVX512_CORE_BF16
#: it emulates bf16
ISA_UNITS = {**dict.fromkeys(("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")),
             **dict.fromkeys(("AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_2_512"), "AVX512-BF16"),
             **dict.fromkeys(("AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16",
                              "AVX10_2_512_AMX_2", "ALL", "DEFAULT"), "AMX-BF16")}


@lru_cache(maxsize=1)
def cpu_bf16_unit() -> str | None:
    """The name of this CPU's native bf16 multiply (AMX-BF16, AVX512-BF16), or None: no such unit, not Linux, a
    torch whose oneDNN runs no bf16, or one that ONEDNN_MAX_CPU_ISA keeps oneDNN from; $CSE_KIT_CPU_UNIT instead."""
    chosen = os.environ.get(CPU_UNIT_ENV, "").strip()
    if chosen:
        return chosen_unit(chosen)
    return detected_bf16_unit()


def chosen_unit(text: str) -> str | None:
    """$CSE_KIT_CPU_UNIT's unit (case-insensitive), or a ValueError naming the values."""
    names = {name.lower(): name for _, name in BF16_UNITS} | {NO_UNIT: None}
    if text.lower() not in names:
        raise ValueError(f"{CPU_UNIT_ENV}={text!r} names no CPU class: set it to one of "
                         f"{', '.join(n for _, n in BF16_UNITS)} or {NO_UNIT}, or unset it")
    return names[text.lower()]


@lru_cache(maxsize=1)
def detected_bf16_unit() -> str | None:
    """cpu_bf16_unit() as /proc/cpuinfo, torch and ONEDNN_MAX_CPU_ISA have it, without $CSE_KIT_CPU_UNIT."""
    try:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text()) if platform.system() == "Linux" else set()
    except OSError:
        flags = set()
    unit = bf16_unit_of(flags)
    return capped_by_isa(unit, os.environ.get("ONEDNN_MAX_CPU_ISA")) if torch.backends.mkldnn.is_available() \
        else None


def capped_by_isa(unit: str | None, max_isa: str | None) -> str | None:
    """The lesser of `unit` and the best one oneDNN runs under ONEDNN_MAX_CPU_ISA=max_isa (unset or unknown: unit)."""
    isa = (max_isa or "").strip().upper()
    if isa not in ISA_UNITS:
        return unit
    speed = [name for _, name in BF16_UNITS] + [None]  # the fastest first
    return max(unit, ISA_UNITS[isa], key=speed.index)


def bf16_unit_of(flags: set[str]) -> str | None:
    """The fastest native bf16 multiply among a CPU's feature flags (BF16_UNITS), or None."""
    return next((name for flag, name in BF16_UNITS if flag in flags), None)


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


@contextlib.contextmanager
def variables_set(values: dict[str, str]):
    """`values` in os.environ for the block (and the processes it starts), then each variable as it was: removed
    where it was not set."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def threads_per_worker(workers: int) -> int:
    """torch threads for each of `workers` processes sharing this machine's cores: with more threads than cores, an
    element-wise kernel waits for the scheduler to run its last thread (a bf16 cast of one activation 8 ms beside
    another 2-thread job, 0.24 ms alone on one thread, on a 2-core CPU: issue 45)."""
    return max(1, (os.cpu_count() or 1) // workers)


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
