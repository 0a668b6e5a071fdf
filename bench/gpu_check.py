"""bench/gpu_check.sh's Python parts: the model folder it trains, and each part's summary lines.

  python bench/gpu_check.py model DIR --shape bert-base|tiny     a random-weight BertModel + bert-base-uncased's
                                                                 tokenizer files, saved into DIR
  python bench/gpu_check.py steps eager.json [captured.json]     the step of every method, eager and captured, and
                                                                 the host synchronisations per step
  python bench/gpu_check.py st st.json                           SimCSE's step against sentence-transformers' MNRL
  python bench/gpu_check.py same RUN_A RUN_B                     whether two runs' log.jsonl dev curves (and losses)
                                                                 are identical
  python bench/gpu_check.py grad-cache grad_cache.json           gradient caching's time and memory ratios
  python bench/gpu_check.py node DEVICE                          the machine: device name, torch, CUDA, CPU

Each prints the lines bench/gpu_check.sh appends to its summary."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

#: the width of the tiny model the CPU check trains (bert-base-uncased's vocabulary, BERT's code)
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def save_model(folder: str, shape: str) -> None:
    """`BertModel(BertConfig(), add_pooling_layer=False)` with random weights (or, tiny, BERT at the kit's smoke
    width) and the offline all-MiniLM-L6-v2's tokenizer files (bert-base-uncased's vocabulary), saved into folder:
    what `cse-kit train --set model=<folder>` loads without the Hub."""
    import torch
    import transformers

    from cse_kit.models import resolve_reference

    torch.manual_seed(0)
    config = transformers.BertConfig(**(TINY if shape == "tiny" else {}))
    model = transformers.BertModel(config, add_pooling_layer=False)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(resolve_reference("all-MiniLM-L6-v2")).save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: random {'BERT-base' if shape != 'tiny' else 'tiny BERT'} ({params / 1e6:.1f} M weights, "
          f"{config.num_hidden_layers} layers of {config.hidden_size}), bert-base-uncased tokenizer, in {folder}")


def node(device: str) -> None:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() \
        else platform.processor()
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        what = (f"{torch.cuda.get_device_name(0)}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, "
                f"driver-visible GPUs {torch.cuda.device_count()}")
    else:
        what = "cpu"
    print(f"node: {what}; torch {torch.__version__}; CPU {cpu}, {os.cpu_count()} cores")


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms"


def steps(eager_path: str, captured_path: str | None) -> None:
    """One line per method: its eager step, its captured one where measured, their ratio; then the host
    synchronisations per step."""
    eager = json.loads(Path(eager_path).read_text())
    captured = json.loads(Path(captured_path).read_text()) if captured_path and Path(captured_path).is_file() \
        else {"results": []}
    compiled = {r["method"]: r for r in captured["results"] if "compile" in r}
    cuda = eager["device"].startswith("cuda")
    done = "" if eager.get("complete") else " (cut short: the methods measured before it stopped)"
    print(f"steps at {eager['shape']} shape{done}, ms per step (data + step), eager | captured: pad fixed, "
          "compile reduce-overhead")
    for r in eager["results"]:
        step = r["main"]["step_s"]
        line = f"  {r['method']:10s} batch {r['batch_size']:3d} {r['precision']:>4s} pad {r['padding']:7s} " \
               f"eager {_ms(step):>10s}"
        if r["stage1"]:
            line += f" (stage 1 {_ms(r['stage1']['step_s'])})"
        c = compiled.get(r["method"])
        if c:
            comp = c["compile"]
            line += (f" | captured {_ms(comp['step_s']):>10s} ({c['main']['step_s'] / comp['step_s']:.2f}x its "
                     f"eager {_ms(c['main']['step_s'])}, compiled in {comp['compile_s']:.0f} s"
                     f"{'' if comp['captured'] else ', not captured: no CUDA'})")
        else:
            line += " | captured: not measured"
        print(line)
    if not cuda:
        print("host synchronisations per step: n/a on cpu (CUDA's set_sync_debug_mode counts them)")
        return
    parts = []
    for r in eager["results"]:
        eager_syncs = r.get("syncs")
        comp = compiled.get(r["method"], {}).get("compile", {}).get("syncs")
        if eager_syncs:
            parts.append(f"{r['method']} {eager_syncs['step']:g} eager" + (f", {comp['step']:g} captured"
                                                                            if comp else ""))
    print("host synchronisations per step: " + ("; ".join(parts) if parts else "not measured"))
    for r in eager["results"]:
        where = (r.get("syncs") or {}).get("where")
        if where:
            print(f"  {r['method']} eager syncs from: " + ", ".join(f"{w} x{n}" for w, n in where))


def st(path: str) -> None:
    r = json.loads(Path(path).read_text())
    ms = r["ms_step"]
    print(f"sentence-transformers MNRL: SimCSE {ms['SimCSE']:.1f} ms/step vs MNRL "
          f"{ms['sentence-transformers MNRL']:.1f} ms/step ({r['precision']}, batch {r['batch_size']}): "
          f"{r['speedup']:.2f}x as fast")


def _curve(run: Path) -> tuple[list, list]:
    """(the dev evaluations, the logged losses) of a run's log.jsonl."""
    dev, losses = [], []
    for line in (run / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "dev" in record:
            dev.append((record["step"], record["dev"]))
        elif "loss" in record:
            losses.append((record["step"], record["loss"]))
    # the dev record's seconds are wall time, not a number the run computes
    dev = [(step, {k: v for k, v in d.items() if k != "seconds"}) for step, d in dev]
    return dev, losses


def same(run_a: str, run_b: str) -> int:
    """Whether two runs' dev curves are identical, and their logged losses. Returns 0 when the dev curves are."""
    (dev_a, loss_a), (dev_b, loss_b) = _curve(Path(run_a)), _curve(Path(run_b))
    dev = "same" if dev_a == dev_b and dev_a else "differ"
    loss = "same" if loss_a == loss_b else "differ"
    last = dev_a[-1] if dev_a else None
    metric = next((k for k in ("stsb_spearman", "sickr_spearman", "avg_sts") if last and k in last[1]), None)
    shown = f"; last {metric} {last[1][metric]} vs {dev_b[-1][1].get(metric)} at step {last[0]}" if metric and dev_b \
        else ""
    print(f"deterministic runs: dev curves {dev} ({len(dev_a)} evaluations), logged losses {loss} "
          f"({len(loss_a)} logs){shown}")
    return 0 if dev == "same" else 1


def grad_cache(path: str) -> None:
    r = json.loads(Path(path).read_text())
    n = r["chunk"]
    rows = {(x["method"], x["batch"], x["chunk"]): x for x in r["results"]}
    parts = []
    for (method, batch, chunk), x in rows.items():
        if not chunk:
            continue
        plain, reference = rows.get((method, batch, 0)), rows.get((method, n, 0))
        time_ratio = f"{x['seconds'] / plain['seconds']:.2f}x time" if plain and plain["seconds"] and x["seconds"] \
            else "time -"
        memory = f"{x['peak_bytes'] / reference['peak_bytes']:.2f}x batch {n}'s memory" \
            if reference and reference["peak_bytes"] and x["peak_bytes"] else "memory -"
        parts.append(f"{method} batch {batch}: {time_ratio}, {memory}")
    print(f"gradient caching (chunks of {n}, {r['precision']}; targets <= 1.4x time, <= 1.5x memory at batch 512): "
          + "; ".join(parts))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    m = sub.add_parser("model")
    m.add_argument("folder")
    m.add_argument("--shape", choices=("bert-base", "tiny"), default="bert-base")
    sub.add_parser("node").add_argument("device")
    s = sub.add_parser("steps")
    s.add_argument("eager")
    s.add_argument("captured", nargs="?")
    sub.add_parser("st").add_argument("path")
    d = sub.add_parser("same")
    d.add_argument("run_a")
    d.add_argument("run_b")
    sub.add_parser("grad-cache").add_argument("path")
    args = p.parse_args(argv)
    if args.part == "model":
        save_model(args.folder, args.shape)
    elif args.part == "node":
        node(args.device)
    elif args.part == "steps":
        steps(args.eager, args.captured)
    elif args.part == "st":
        st(args.path)
    elif args.part == "same":
        return same(args.run_a, args.run_b)
    elif args.part == "grad-cache":
        grad_cache(args.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
