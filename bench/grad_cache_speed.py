"""Gradient caching's memory and time at the papers' shape (issue 58): `python bench/train_speed.py --grad-cache N`.

  python bench/train_speed.py --grad-cache 32 [--shape bert-base|tiny] [--methods simcse,diffcse,...]
                              [--batches 64,128,512] [--device cpu|cuda] [--mixed-precision no|bf16]
                              [--pad longest|fixed|buckets] [--output result.json]

Each method's paper preset around a config-built BERT-base (bench/paper_speed.py: random weights, the repeated
Wiki1M sample, DiffCSE's DistilBERT-shaped generator), one optimizer step at each batch size, plain and with
`grad_cache=N`, and a plain step at batch N: the memory target's reference. The step is the loop's
(cse_kit.train.step.TrainStep, built by paper_speed.train_step: forward and backward, cached or not, clipping, the
optimizer and schedule), its batch made before the clock starts; batches padded as `--pad` says (default: the run's
auto, fixed on CUDA). Every measurement
runs in a process of its own, so its peak is its own: peak resident memory (VmHWM) on CPU,
`torch.cuda.max_memory_allocated` on CUDA. One untimed step first (allocator and thread pools warm), then one timed
step. Prints a table: method, batch, chunk, step seconds, peak memory, and per batch the cached/plain time ratio and
the cached peak over the plain batch-N step's (targets: <= 1.4x and <= 1.5x). A step that does not fit the machine's
memory (the kernel kills its process) is printed as such: what caching is for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

#: the targets of issue 58: at batch 512 in chunks of 32, peak memory within 1.5x of a plain batch-32 step, step time
#: at most 1.4x the uncached step
MEMORY_TARGET, TIME_TARGET = 1.5, 1.4


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status: peak memory is measured on Linux only")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from the current resident set


def one(method: str, batch_size: int, chunk: int, args) -> dict:
    """One measurement, in this process: (seconds of the timed step, peak bytes)."""
    import paper_speed

    from cse_kit.environment import keep_freed_memory
    from cse_kit.train.step import resolve_padding

    paper_speed.hide_gpu_for_cpu(args.device)
    if args.device == "cpu":
        keep_freed_memory()  # as `cse-kit train` does on CPU

    args.batch_size = batch_size
    tokenizer = paper_speed.shape_tokenizer()
    cfg, objective = paper_speed.build_method(method, args, tokenizer, args.mixed_precision, grad_cache=chunk)
    device = torch.device(args.device)
    padding = resolve_padding(args.pad or cfg.pad_to, device.type == "cuda")
    batches = paper_speed.method_batches(cfg, tokenizer, args, padding=padding)
    nli = paper_speed.method_batches(cfg, tokenizer, args, nli=True, padding=padding) if cfg.aux_weight else None
    step = paper_speed.train_step(cfg, objective, batches, nli, device)
    step.objective.train()
    start = step.first_stage  # DiffAug: its main stage is the contrastive one
    step.timed(start)
    reset_peak(device)
    seconds = step.timed(start + 1)["step"]
    return {"method": method, "batch": batch_size, "chunk": chunk, "seconds": seconds,
            "peak_bytes": peak_memory(device), "padding": padding}


def paper_speed_methods() -> list[str]:
    """Every method bench/paper_speed.py builds at the papers' shape."""
    import paper_speed

    return list(paper_speed.PRESETS["bert-base"])


def measure(method: str, batch_size: int, chunk: int, args) -> dict:
    command = [sys.executable, str(Path(__file__).resolve().parent / "train_speed.py"), "--grad-cache",
               str(args.grad_cache), "--one", f"{method},{batch_size},{chunk}", "--shape", args.shape,
               "--device", args.device, "--mixed-precision", args.mixed_precision]
    if args.pad:
        command += ["--pad", args.pad]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == -9:  # the kernel's OOM killer: the step does not fit this machine's memory
        return {"method": method, "batch": batch_size, "chunk": chunk, "seconds": None, "peak_bytes": None}
    if done.returncode:
        raise SystemExit(f"{method} batch {batch_size} chunk {chunk} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cells(result: dict) -> str:
    if result["seconds"] is None:
        return "killed: out of memory | - "
    return f"{result['seconds']:.2f} | {result['peak_bytes'] / 2**30:.2f} "


def _ratio(a, b) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def main(args) -> list[dict]:
    args.shape = args.shape or "bert-base"
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.mixed_precision = (args.mixed_precision or ["no"])[0] if isinstance(args.mixed_precision, list) else \
        (args.mixed_precision or "no")
    if args.one:
        method, batch_size, chunk = args.one.split(",")
        print(json.dumps(one(method, int(batch_size), int(chunk), args)))
        return []
    methods = args.methods.split(",") if args.methods else list(paper_speed_methods())
    batches = [int(b) for b in (args.batches or "64,128,512").split(",")]
    n = args.grad_cache
    print(f"gradient caching at {args.shape} shape on {args.device} ({args.mixed_precision}), chunks of {n} rows; "
          "one timed step each, after one untimed", flush=True)
    results = []
    print(f"| method | batch | chunk | step s | peak {'GPU ' if args.device == 'cuda' else 'RSS '}GiB | "
          f"time cached/plain | peak cached / plain batch {n} |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    for method in methods:
        reference = measure(method, n, 0, args)
        results.append(reference)
        print(f"| {method} | {n} | - | {_cells(reference)}| | |", flush=True)
        for batch_size in batches:
            plain, cached = measure(method, batch_size, 0, args), measure(method, batch_size, n, args)
            results += [plain, cached]
            print(f"| {method} | {batch_size} | - | {_cells(plain)}| | |")
            print(f"| {method} | {batch_size} | {n} | {_cells(cached)}| {_ratio(cached['seconds'], plain['seconds'])} "
                  f"| {_ratio(cached['peak_bytes'], reference['peak_bytes'])} |", flush=True)
    print(f"targets: time cached/plain <= {TIME_TARGET}x, peak cached / plain batch {n} <= {MEMORY_TARGET}x "
          "(at batch 512)")
    if args.output:
        from cse_kit.train.precision import resolve_precision

        precision = resolve_precision(args.mixed_precision, args.device == "cuda")  # auto, as the runs resolved it
        Path(args.output).write_text(json.dumps({"shape": args.shape, "device": args.device, "chunk": n,
                                                 "precision": precision, "results": results}, indent=1))
    return results
