"""Evaluation speed on this machine (issue: evaluation suite).

  python bench/eval_speed.py sts       # 7-task STS test eval vs a bare transformers encoding loop
  python bench/eval_speed.py dev       # the training-loop dev evaluator (STS-B dev), seconds per call
  python bench/eval_speed.py encode [--shape bert-base] [--device cuda] [--limit N]
                                       # encoding throughput (sentences/s) of every distinct sentence of
                                       # `--tasks all`: fixed batches of 128 vs the token budget, same numbers?
                                       # (--shape bert-base: BertConfig() with random weights, no download)
  python bench/eval_speed.py full [--shape minilm|bert-base|roberta-base] [--device cuda|cpu] [--tasks all]
                                  [--mode test] [--pooler avg] [--tf32] [--amp]
                                       # `cse-kit eval --tasks all --mode test` timed in parts: encoding (every
                                       # distinct sentence once), STS scoring, each transfer task's classifiers;
                                       # --tf32 (CUDA): evaluates with TF32 matmuls off, then on, and prints every
                                       # number (STS and transfer, 4 decimals) that moves, and both times;
                                       # --amp: fp32, then bf16 autocast (`cse-kit eval --amp`), the same, with
                                       # each dtype's matmul ceiling measured in the run
  python bench/eval_speed.py eta [--tasks all] [--limit N]
                                       # the encoding bar's ETA against the time the encoding really took: how far
                                       # off it is after the first 10% of the work (the target: within 20%)
  python bench/eval_speed.py transfer --senteval PATH/TO/SentEval [--modes fasttest,test] [--tasks MR,CR]
                                       [--cache emb.npz] [--no-original]
                                       # classifier time vs the original SentEval on the same embeddings
                                       # (--cache keeps the sentence embeddings between invocations)

Prints medians over --repeats runs (alternating the two sides, so machine noise hits both alike); `full` runs once.
The shapes: minilm is the real all-MiniLM-L6-v2; bert-base and roberta-base are built from their configs with random
weights (bench/paper_speed.py), both reading bert-base-uncased's tokenization (no RoBERTa tokenizer offline: its ids
are all valid RoBERTa ids, and the lengths are what the encoding costs).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from cse_kit.data import resolve_data_dir
from cse_kit.eval import DevEvaluator, Encoder, evaluate, load_task
from cse_kit.eval.transfer import TRANSFER_TASKS, evaluate_transfer_task
from cse_kit.models import load_model


def bare_encode(model, tokenizer, sentences, batch_size=128):
    """What a user would write with transformers alone: length-sorted batches, mean pooling."""
    order = sorted(sentences, key=len, reverse=True)
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            b = tokenizer(order[i:i + batch_size], padding=True, return_tensors="pt")
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1)
            (h * m).sum(1) / m.sum(1)


def bench_sts(tokenizer, model, args):
    walls, bares, result = [], [], None
    for _ in range(args.repeats):
        enc = Encoder(model, tokenizer, "avg", progress=False)
        t = time.perf_counter()
        result = evaluate(enc, "sts", "test", args.data_dir, model_name="all-MiniLM-L6-v2")
        walls.append(time.perf_counter() - t)
        sentences = list(enc._cache)
        t = time.perf_counter()
        bare_encode(model, tokenizer, sentences)
        bares.append(time.perf_counter() - t)
    n = result["timings"]["distinct_sentences"]
    w, b = statistics.median(walls), statistics.median(bares)
    print(f"7-task STS test eval, all-MiniLM-L6-v2 avg, {torch.get_num_threads()} threads, {args.repeats} runs")
    print(f"  distinct sentences        {n}")
    print(f"  full evaluation wall      {w:.1f} s (median; runs: {', '.join(f'{x:.1f}' for x in walls)})")
    print(f"  sentences / s             {n / w:.0f}")
    print(f"  bare transformers loop    {b:.1f} s (median; runs: {', '.join(f'{x:.1f}' for x in bares)})")
    print(f"  ratio full / bare         {w / b:.3f}  (everything beyond encoding: {100 * (w / b - 1):+.1f}%)")
    print(f"  STS avg                   {result['sts']['avg']:.2f}")


def bench_dev(tokenizer, model, args):
    dev = DevEvaluator(tokenizer, "cls_before_pooler", args.data_dir)
    times = [dev(model)["seconds"] for _ in range(args.repeats)]
    print(f"dev evaluator (STS-B dev, 1500 pairs): {statistics.median(times):.2f} s per call (median of "
          f"{args.repeats}: {', '.join(f'{x:.2f}' for x in times)})")


def bench_transfer(tokenizer, model, args):
    sys.path.insert(0, str(Path(__file__).parent))
    from senteval_reference import load_original_senteval

    senteval = None if args.no_original else load_original_senteval(args.senteval)
    data_dir = resolve_data_dir(args.data_dir)
    enc = Encoder(model, tokenizer, "avg", progress=False)
    cache = Path(args.cache) if args.cache else None
    if cache and cache.is_file():  # numbers and strings only: a cache file is data, never code
        with np.load(cache, allow_pickle=False) as saved:
            enc._cache.update(zip(saved["sentences"].tolist(), saved["vectors"]))
    tasks = {t: load_task(t, data_dir) for t in (args.tasks or ",".join(TRANSFER_TASKS)).split(",")}
    t = time.perf_counter()
    enc.encode([s for d in tasks.values() for s in d.sentences()])
    print(f"encoding the transfer sentences not in the cache: {time.perf_counter() - t:.1f} s")
    if cache:
        with cache.open("wb") as f:
            np.savez(f, sentences=np.array(list(enc._cache)), vectors=np.stack(list(enc._cache.values())))

    def lookup(params, batch):  # the original gets the very same embeddings
        return torch.from_numpy(enc.encode([" ".join(s) for s in batch]))

    for mode in args.modes.split(","):
        cfg = {"test": {"kfold": 10, "classifier": {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5,
                                                     "epoch_size": 4}},
               "fasttest": {"kfold": 5, "classifier": {"nhid": 0, "optim": "rmsprop", "batch_size": 128,
                                                        "tenacity": 3, "epoch_size": 2}}}[mode]
        params = {"task_path": str(data_dir), "usepytorch": True, "seed": 1111, **cfg}
        print(f"\nmode {mode}: task | ours dev/test | original dev/test | ours s | original s | speed-up")
        tot_ours = tot_ref = 0.0
        for task, data in tasks.items():
            ours, ref_times, ref = [], [], {"devacc": float("nan"), "acc": float("nan")}
            for _ in range(args.repeats):  # alternating, so machine noise hits both sides alike
                ours.append(evaluate_transfer_task(enc, data, mode))
                if senteval:
                    t = time.perf_counter()
                    ref = senteval.engine.SE(params, lookup).eval(task)
                    ref_times.append(time.perf_counter() - t)
            o = statistics.median(r["seconds"]["classifier"] for r in ours)
            r = statistics.median(ref_times) if ref_times else float("nan")
            tot_ours, tot_ref = tot_ours + o, tot_ref + r
            print(f"  {task:5s} | {ours[0]['devacc']:.2f}/{ours[0]['acc']:.2f} | {ref['devacc']:.2f}/{ref['acc']:.2f}"
                  f" | {o:.1f} | {r:.1f} | {r / o:.1f}x", flush=True)
        print(f"  total classifier time: ours {tot_ours:.1f} s, original {tot_ref:.1f} s, "
              f"speed-up {tot_ref / tot_ours:.1f}x")


def shape_model(model, args):
    """all-MiniLM-L6-v2 (given), or the bert-base / roberta-base shape with random weights."""
    if args.shape == "minilm":
        return model
    sys.path.insert(0, str(Path(__file__).parent))
    from paper_speed import shape_encoder

    torch.manual_seed(0)
    return shape_encoder(args.shape).eval()


def bench_encode(tokenizer, model, args):
    from cse_kit.eval.runner import evaluation_inputs

    model = shape_model(model, args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sentences = list(dict.fromkeys(evaluation_inputs("all", "test", args.data_dir)[2]))[:args.limit]
    print(f"{len(sentences)} distinct sentences, {args.shape}, {device}, fp32, {args.repeats} runs (median)")
    result = {}
    for name, budget in (("fixed 128", None), (f"budget {args.max_tokens}", args.max_tokens)):
        times = []
        for _ in range(args.repeats):  # a fresh encoder each run: nothing cached
            enc = Encoder(model, tokenizer, "cls_before_pooler", max_tokens=budget, device=device, progress=False)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            result[name] = enc.encode(sentences)
            times.append(time.perf_counter() - t)
        m = statistics.median(times)
        print(f"  {name:14s} {m:7.2f} s  {len(sentences) / m:9.0f} sentences/s")
    a, b = result.values()
    print(f"  largest embedding difference between the two: {np.abs(a - b).max():.2e}")


def bench_eta(tokenizer, model, args):
    """Every ETA the encoding bar could show (its own smoothed rate, at each update) against the real end."""
    import contextlib
    import io

    from tqdm import tqdm

    from cse_kit.eval.runner import evaluation_inputs

    model = shape_model(model, args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sentences = list(dict.fromkeys(evaluation_inputs(args.tasks or "all", "test", args.data_dir)[2]))[:args.limit]
    samples, update = [], tqdm.update

    def recording(bar, n=1):  # what the bar would print after this update: elapsed, share done, ETA
        out = update(bar, n)
        d = bar.format_dict
        if d["rate"]:
            samples.append((d["elapsed"], d["n"] / d["total"], (d["total"] - d["n"]) / d["rate"]))
        return out

    tqdm.update = recording
    try:
        enc = Encoder(model, tokenizer, args.pooler, device=device, progress=True)
        with contextlib.redirect_stderr(io.StringIO()):
            enc.encode(sentences)
    finally:
        tqdm.update = update
    end = samples[-1][0]
    errors = [(elapsed + eta - end) / end for elapsed, done, eta in samples if done >= 0.1]
    worst = max(errors, key=abs)
    median = 100 * statistics.median(map(abs, errors))
    print(f"{len(sentences)} distinct sentences, {args.shape}, {device}: encoding took {end:.1f} s; after the first "
          f"10% of the work the bar's projected total was off by a median {median:.1f}%, at worst {100 * worst:+.1f}%; "
          f"{100 * np.mean([abs(e) <= 0.2 for e in errors]):.0f}% of its {len(errors)} updates within 20%")


def _numbers(result: dict, prefix: str = "") -> dict:
    """Every number of a result's sts and transfer parts, by path (timings and counts left out)."""
    out = {}
    for k, v in result.items():
        if k in ("seconds", "n", "ndev", "ntest"):
            continue
        if isinstance(v, dict):
            out.update(_numbers(v, f"{prefix}{k}."))
        elif isinstance(v, float):
            out[f"{prefix}{k}"] = v
    return out


def run_full(tokenizer, model, args, amp: bool = False) -> dict:
    """One `cse-kit eval` of the model (a fresh encoder: nothing cached); amp: `cse-kit eval --amp`."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    enc = Encoder(model, tokenizer, args.pooler, device=device, amp=amp, progress=False)
    start = time.perf_counter()
    result = evaluate(enc, args.tasks or "all", args.mode, args.data_dir, model_name=args.shape)
    result["timings"]["wall_s"] = time.perf_counter() - start
    return result


def print_full(result: dict, args, label: str = "") -> None:
    t = result["timings"]
    classifiers = {k: v["seconds"]["classifier"] for k, v in result["transfer"].items() if k != "avg"}
    total = t["wall_s"]
    rest = total - t["encode_s"] - t["sts_s"] - sum(classifiers.values())
    env = result["environment"]
    device = env.get("gpu") or f"{env['device']}, {env['torch_threads']} threads"
    print(f"cse-kit eval --tasks {args.tasks or 'all'} --mode {args.mode}, {args.shape} shape"
          f"{' (random weights)' if args.shape != 'minilm' else ''}, pooler {args.pooler}, {device}, "
          f"{'bf16 autocast' if result['amp'] else 'fp32'}{label}")
    print(f"  encoding             {t['encode_s']:8.1f} s  {100 * t['encode_s'] / total:5.1f}%  "
          f"({t['distinct_sentences']} distinct sentences, {t['distinct_sentences'] / t['encode_s']:.0f} sentences/s)")
    print(f"  STS scoring          {t['sts_s']:8.1f} s  {100 * t['sts_s'] / total:5.1f}%")
    print(f"  transfer classifiers {sum(classifiers.values()):8.1f} s  {100 * sum(classifiers.values()) / total:5.1f}%"
          + (f"  ({', '.join(f'{k} {v:.1f}' for k, v in classifiers.items())})" if classifiers else ""))
    print(f"  the rest             {rest:8.1f} s  {100 * rest / total:5.1f}%  (loading the data, feature look-ups)")
    print(f"  total                {total:8.1f} s")


def bench_full(tokenizer, model, args):
    model = shape_model(model, args)
    cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if args.amp:
        return compare_amp(tokenizer, model, args)
    if not args.tf32:
        return print_full(run_full(tokenizer, model, args), args)
    if not cuda:
        print("--tf32: TF32 is a CUDA (Ampere and later) matmul mode; nothing to measure on CPU")
        return print_full(run_full(tokenizer, model, args), args)
    previous = torch.get_float32_matmul_precision()
    runs = {}
    for precision in ("highest", "high"):  # TF32 off (torch's default), then on
        torch.set_float32_matmul_precision(precision)
        try:
            runs[precision] = run_full(tokenizer, model, args)
        finally:
            torch.set_float32_matmul_precision(previous)
        print_full(runs[precision], args, ", TF32 " + ("on" if precision == "high" else "off"))
    print_moved("TF32", *runs.values())
    print(f"wall time: {runs['highest']['timings']['wall_s']:.1f} s off, {runs['high']['timings']['wall_s']:.1f} s on")


def print_moved(what: str, before: dict, after: dict) -> None:
    """Every STS and transfer number that `what` moved at 4 decimals, and the largest move."""
    off, on = (_numbers({"sts": r["sts"], "transfer": r["transfer"]}) for r in (before, after))
    moved = {k: (off[k], on.get(k)) for k in off if on.get(k) is None or round(off[k], 4) != round(on[k], 4)}
    largest = max((abs(b - a) for a, b in moved.values() if b is not None), default=0.0)
    print(f"{what} moved {len(moved)} of {len(off)} numbers at 4 decimals, at most by {largest:.4f}"
          + "".join(f"\n  {k}: {a:.4f} -> {b:.4f}" for k, (a, b) in moved.items()))


def compare_amp(tokenizer, model, args) -> None:
    """fp32, then `--amp` (bf16 autocast on a CPU with a bf16 unit, bf16/fp16 on CUDA), in one run: both times,
    the matmul ceiling of each dtype measured in the same run, and every number the autocast moved."""
    sys.path.insert(0, str(Path(__file__).parent))
    from paper_speed import matmul_ceiling

    runs = [run_full(tokenizer, model, args), run_full(tokenizer, model, args, amp=True)]
    for r in runs:
        print_full(r, args)
    if not runs[1]["amp"]:
        print("--amp: this device has no bf16 unit (AMX-BF16, AVX512-BF16) or GPU: the second run was fp32 as well")
        return
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    ceiling = {dtype: matmul_ceiling(dtype, device) for dtype in (torch.float32, torch.bfloat16)}
    fp32, amp = (r["timings"] for r in runs)
    print(f"encoding: {fp32['encode_s']:.1f} s fp32, {amp['encode_s']:.1f} s bf16 "
          f"({fp32['encode_s'] / amp['encode_s']:.2f}x); "
          f"the matmul ceiling measured now (2048³): fp32 {ceiling[torch.float32]:.3f} TFLOP/s, bf16 "
          f"{ceiling[torch.bfloat16]:.3f} ({ceiling[torch.bfloat16] / ceiling[torch.float32]:.2f}x)")
    print(f"wall time: {fp32['wall_s']:.1f} s fp32, {amp['wall_s']:.1f} s bf16 ({fp32['wall_s'] / amp['wall_s']:.2f}x)")
    print_moved("bf16 autocast", *runs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["sts", "dev", "transfer", "encode", "full", "eta"])
    p.add_argument("--shape", default="minilm", choices=["minilm", "bert-base", "roberta-base"],
                   help="encode and full: the real all-MiniLM-L6-v2, or a paper shape with random weights")
    p.add_argument("--device")
    p.add_argument("--mode", default="test", help="full: the evaluation mode (test, fasttest, dev)")
    p.add_argument("--pooler", default="avg", help="full and eta: the pooler")
    p.add_argument("--tf32", action="store_true", help="full, CUDA: evaluate with TF32 matmuls off and on, compare")
    p.add_argument("--amp", action="store_true", help="full: evaluate in fp32, then as `cse-kit eval --amp` (bf16 "
                                                      "autocast on a CPU with a bf16 unit or a GPU), compare")
    p.add_argument("--limit", type=int, default=None, help="encode only the first N distinct sentences")
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--data-dir")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--senteval", help="path of a SentEval checkout (its folder holding senteval/)")
    p.add_argument("--modes", default="fasttest,test")
    p.add_argument("--tasks", help="transfer: the tasks to time (default: the seven); full and eta: what cse-kit "
                                   "eval --tasks takes (default: all)")
    p.add_argument("--cache", help="an .npz of sentence embeddings, read if present and written after encoding")
    p.add_argument("--no-original", action="store_true", help="time only our classifiers")
    args = p.parse_args()
    tokenizer, model = load_model("all-MiniLM-L6-v2")
    model.eval()
    benches = {"sts": bench_sts, "dev": bench_dev, "transfer": bench_transfer, "encode": bench_encode,
               "full": bench_full, "eta": bench_eta}
    benches[args.what](tokenizer, model, args)


if __name__ == "__main__":
    np.set_printoptions(precision=2)
    main()
