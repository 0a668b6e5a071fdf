"""The device's peak and bench/paper_speed.py's printed report: the dense peak TFLOP/s of a GPU by its name
(PEAK_TFLOPS, from NVIDIA's datasheets), a CPU's matmul ceiling measured in the run, the table of each method's
step, its projected full run, its precisions side by side, its compiled step and host synchronisations, and the
measurements as JSON."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import torch

#: dense (no structured sparsity) peak TFLOP/s per precision, from NVIDIA's datasheets: bf16/fp16 tensor cores, TF32
#: tensor cores, plain fp32. None: the card has no such unit (Volta, Turing: no bf16, no TF32).
PEAK_TFLOPS = {
    "H100 SXM": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 PCIe": {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2},
    "H100 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H200 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "RTX 8000": {"bf16": None, "fp16": 130.5, "tf32": None, "fp32": 16.3},
    "V100 SXM2": {"bf16": None, "fp16": 125.0, "tf32": None, "fp32": 15.7},
    "V100 PCIe": {"bf16": None, "fp16": 112.0, "tf32": None, "fp32": 14.0},
}
#: torch.cuda.get_device_name() patterns -> PEAK_TFLOPS key, the first match wins
GPU_NAMES = [(r"H100.*NVL", "H100 NVL"), (r"H100.*PCIe", "H100 PCIe"), (r"H100", "H100 SXM"),
             (r"H200.*NVL", "H200 NVL"), (r"H200", "H200"), (r"A100", "A100"), (r"\bL4\b", "L4"),
             (r"\bA10\b", "A10"), (r"RTX 8000", "RTX 8000"), (r"V100.*PCI", "V100 PCIe"), (r"V100", "V100 SXM2")]


def tf32_allowed() -> bool:
    return torch.get_float32_matmul_precision() != "highest"


def gpu_peak(name: str, unit: str) -> tuple[float | None, str]:
    """(PEAK_TFLOPS of the card torch.cuda.get_device_name calls `name`, for unit bf16|fp16|tf32|fp32, what it is)."""
    card = next((key for pattern, key in GPU_NAMES if re.search(pattern, name)), None)
    if card is None or PEAK_TFLOPS[card][unit] is None:
        return None, f"no {unit} peak known for {name} (give --peak-tflops)"
    return PEAK_TFLOPS[card][unit], f"{card} dense {unit}"


def matmul_ceiling(dtype: torch.dtype, device, n: int = 2048, repeats: int = 5) -> float:
    """TFLOP/s of one n x n by n x n product in `dtype` on `device`, the median of `repeats` after one warm-up: the
    ceiling a training step's matmuls can reach here, measured in the same run as the step (on a shared CPU the
    load moves both alike)."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    seconds = []
    for i in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return 2 * n ** 3 / statistics.median(seconds[1:]) / 1e12


def peak_tflops(device, precision: str, given: float | None) -> tuple[float | None, str]:
    """(peak TFLOP/s, what it is) for the precision a step runs in ("bf16", "fp16", else fp32 matmuls: TF32 when
    allowed); `given` (--peak-tflops) wins; on CPU the matmul ceiling of the precision's dtype measured now; None on
    unknown GPUs."""
    if given:
        return given, "--peak-tflops"
    if device.type != "cuda":
        name, dtype = ("bf16", torch.bfloat16) if precision == "bf16" else ("fp32", torch.float32)
        return matmul_ceiling(dtype, device), f"{name} matmul ceiling, 2048³, measured in this run"
    unit = precision if precision in ("bf16", "fp16") else ("tf32" if tf32_allowed() else "fp32")
    return gpu_peak(torch.cuda.get_device_name(device), unit)


def profile_step(step, index: int, label: str, rows: int = 25) -> None:
    """torch.profiler over one more step (its batches made inside, as the loop's): the operators by their own time,
    and the share of matrix work in it."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if step.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step.prepare(index)
        step.step(index)
        step.sync()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if re.search(r"mm|matmul|linear|addmm|bmm|_mkl|onednn", e.key))
    print(f"profile of one {label} step: matrix operators {100 * matmul / total:.0f}% of the operators' own time")
    print(events.table(sort_by="self_cpu_time_total", row_limit=rows))


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def row(result: dict, peak: float | None, stage: str = "main") -> dict:
    timing = result[stage]
    batch = result["batch_size"] if stage == "main" else result["stage1_batch_size"]
    achieved = timing["flops"] / timing["step_s"] / 1e12
    return {"ms_step": 1000 * timing["step_s"], "sentences_s": batch / timing["step_s"],
            "tflop_step": timing["flops"] / 1e12, "tflops": achieved,
            "peak_fraction": achieved / peak if peak else None}


def padding_words(result: dict) -> str:
    """How a method's batches were padded: `fixed (32 tokens)`, `longest`."""
    fixed = result.get("fixed_length")
    return f"{result['padding']} ({fixed} tokens)" if result["padding"] != "longest" and fixed else result["padding"]


def print_report(results: list[dict], args, device, peaks: dict[str, tuple[float | None, str]]) -> None:
    """The table, and each method's precisions side by side; `peaks`: precision -> (peak TFLOP/s, what it is)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    described = "; ".join(f"{precision_name(p)} {v:.3f} TFLOP/s ({note})" if v else f"{precision_name(p)}: {note}"
                          for p, (v, note) in peaks.items())
    paddings = ", ".join(dict.fromkeys(f"{r['method']} {padding_words(r)}" for r in results))
    print(f"training speed, {args.shape} shape (random weights, built from its config), {name}, "
          f"medians of {args.steps} steps after {args.warmup} warm-up; peak: {described}; TF32 matmuls "
          f"{'allowed' if tf32_allowed() else 'not allowed'}")
    print("corpus: the Wiki1M sample (11,913 lines) repeated to 1,000,000 lines in memory, tokenized per batch; "
          f"padding: {paddings}")
    print("timed: the loop's step (cse_kit.train.step.TrainStep: forward, backward, clipping, optimizer, schedule), "
          "its batches made just before it (data)")
    head = (f"{'method':18s} {'preset':22s} {'batch':>5s} {'prec':>4s} {'ms/step':>9s} {'sent/s':>8s} "
            f"{'TFLOP/step':>10s} {'% peak':>7s} {'data':>5s} {'step':>5s} {'dev':>5s} "
            f"{'ckpt':>5s} {'full run':>9s}")
    print(head)
    for r in results:
        projection = r["projection"]
        shares = {k: 100 * v / projection["total_s"] for k, v in projection["parts_s"].items()}
        for stage in ("main", "stage1") if r["stage1"] else ("main",):
            m = row(r, peaks[r["precision"]][0], stage)
            label = r["method"] + (" stage 1" if stage == "stage1" else "")
            fraction = f"{100 * m['peak_fraction']:.1f}" if m["peak_fraction"] is not None else "n/a"
            tail = (f"{shares['data']:5.1f} {shares['step']:5.1f} "
                    f"{shares['dev evaluation']:5.1f} {shares['checkpoint']:5.1f} {_hours(projection['total_s']):>9s}"
                    if stage == "main" else "(NLI triplets; in DiffAug's full run)")
            batch = r["batch_size"] if stage == "main" else r["stage1_batch_size"]
            print(f"{label:18s} {r['preset']:22s} {batch:5d} {r['precision']:>4s} {m['ms_step']:9.1f} "
                  f"{m['sentences_s']:8.1f} {m['tflop_step']:10.3f} {fraction:>7s} {tail}")
    print("ms/step: data + step; shares (%) are of the projected full run: data, step, dev evaluations, checkpoints")
    for r in results:
        p, d = r["projection"], r["dev"]
        scaled = f", scaled from {d['pairs']} of {d['of']} pairs" if d["pairs"] != d["of"] else ""
        stage1 = f"{p['stage1_steps']} stage-1 + " if p["stage1_steps"] else ""
        parts = ", ".join(f"{k} {1000 * v:.1f} ms" for k, v in r["main"]["parts"].items())
        print(f"  {r['method']}: {parts}; {stage1}{p['steps']} steps, {p['evaluations']} dev evaluations of "
              f"{d['seconds']:.2f} s{scaled}, {p['checkpoints']} checkpoints of {r['checkpoint_s']:.2f} s")
    print_precisions(results)
    for r in results:
        if "tf32" in r:
            t = r["tf32"]
            print(f"  TF32 {r['method']}: {1000 * t['off_step_s']:.1f} ms/step off, {1000 * t['on_step_s']:.1f} on "
                  f"({t['off_step_s'] / t['on_step_s']:.2f}x); whether it moves a number: eval_speed.py full --tf32")
        if "compile" in r:
            c = r["compile"]
            verdict = "pays off" if c["full_run_saving_s"] > 0 else "does not pay off"
            even = c["break_even_steps"] if c["break_even_steps"] is not None else "never"
            mode = "true" if c["mode"] is True else c["mode"]
            how = f"compile={mode}, {'captured in CUDA graphs' if c['captured'] else 'not captured'}, " \
                  f"pad {padding_words(r)}"
            print(f"  compile {r['method']} ({how}): {1000 * c['step_s']:.1f} ms/step compiled vs "
                  f"{1000 * r['main']['step_s']:.1f} eager ({c['speedup']:.2f}x), compilation {c['compile_s']:.1f} s, "
                  f"break-even after {even} steps, full run {c['full_run_saving_s'] / 60:+.1f} min saved: {verdict}")
    if args.sync_check:
        print_syncs(results, device)


def print_syncs(results: list[dict], device) -> None:
    """--sync-check: host synchronisations per step, eager and compiled."""
    if device.type != "cuda":
        print("  host synchronisations per step: n/a on cpu (torch.cuda.set_sync_debug_mode counts CUDA's)")
        return
    for r in results:
        for label, syncs in (("eager", r["syncs"]), ("compiled", r.get("compile", {}).get("syncs"))):
            if syncs:
                where = ", ".join(f"{place} x{n}" for place, n in syncs["where"]) or "none"
                print(f"  host synchronisations per step, {r['method']} {label}: {syncs['step']:g} in the step, "
                      f"{syncs['data']:g} in its data ({syncs['steps']} steps); the step's from: {where}")


def precision_name(precision: str) -> str:
    return "fp32" if precision == "no" else precision


def print_precisions(results: list[dict]) -> None:
    """Each method timed in several precisions: the later ones' step time beside the first's, in one run."""
    by_method: dict[str, list[dict]] = {}
    for r in results:
        by_method.setdefault(r["method"], []).append(r)
    for method, runs in by_method.items():
        first = runs[0]
        for r in runs[1:]:
            print(f"  {method}: {precision_name(r['precision'])} {r['main']['step_s']:.3f} s/step vs "
                  f"{precision_name(first['precision'])} {first['main']['step_s']:.3f} s/step: "
                  f"{first['main']['step_s'] / r['main']['step_s']:.2f}x as fast")


def write_output(path, results: list[dict], args, device, peaks: dict | None) -> None:
    """The measurements as JSON; written after each method too (`complete` false), so a run cut short keeps what
    it measured."""
    if not path:
        return
    if peaks:
        for r in results:
            r.update(row(r, peaks[r["precision"]][0]))
    Path(path).write_text(json.dumps({"shape": args.shape, "device": str(device), "complete": peaks is not None,
                                      "peak_tflops": {p: v for p, (v, _) in (peaks or {}).items()},
                                      "peak": {p: note for p, (_, note) in (peaks or {}).items()},
                                      "results": results}, indent=1))
