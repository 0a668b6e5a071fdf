"""`cse-kit eval`: STS and transfer results in the shape the papers report, with timings and environment."""

from __future__ import annotations

import time

import numpy as np

from ..data import STS_TASKS, TRANSFER_TASKS
from ..environment import describe
from .encode import Encoder
from .sts import STS_YEARS, evaluate_sts_task, headline, sts_pairs
from .transfer import evaluate_transfer_task, load_task
from .user_tasks import UserTask, evaluate_user_task, parse_user_task, read_task
from .user_tasks import headline as user_headline

MODES = ("dev", "test", "fasttest")
TASK_SETS = {"sts": STS_TASKS, "transfer": TRANSFER_TASKS, "all": STS_TASKS + TRANSFER_TASKS}


def parse_tasks(spec: str) -> tuple:
    """`sts`, `transfer`, `all`, or a comma-separated list of task names, those sets and tasks of one's own
    (`sts,MR,mine=pairs.csv`: cse_kit.eval.user_tasks), each file checked now."""
    parts = [t.strip() for t in spec.split(",") if t.strip()]
    names = tuple(dict.fromkeys(n for t in parts if "=" not in t for n in TASK_SETS.get(t, (t,))))
    unknown = [t for t in names if t not in TASK_SETS["all"]]
    own = tuple(parse_user_task(t) for t in parts if "=" in t)
    if unknown or not (names or own):
        bad = ", ".join(unknown) if unknown else repr(spec)
        raise ValueError(f"unknown task(s) {bad}; use sts, transfer, all, names from {', '.join(TASK_SETS['all'])}, "
                         "or name=path.csv for a task of your own")
    return names + own


def evaluation_inputs(tasks="all", mode: str = "test", data_dir=None, transfer_sample: int | None = None,
                      sts_sample: int | None = None) -> tuple[dict, dict, list[str]]:
    """The STS pairs and transfer data of tasks in mode (at most transfer_sample records per transfer split and
    sts_sample pairs per STS subset when given), and every sentence they encode (in task order)."""
    tasks = parse_tasks(tasks) if isinstance(tasks, str) else tuple(tasks)
    sts_tasks = [t for t in tasks if t in STS_TASKS and not (mode == "dev" and t in STS_YEARS)]
    sts_inputs = {t: sts_pairs(t, mode, data_dir, sts_sample) for t in sts_tasks}
    transfer_inputs = {t: load_task(t, data_dir, transfer_sample) for t in tasks if t in TRANSFER_TASKS}
    sentences = [s for ps in sts_inputs.values() for split in ps.values() for p in split for s in (p.sent1, p.sent2)]
    sentences += [s for d in transfer_inputs.values() for s in d.sentences()]
    sentences += [s for t in tasks if isinstance(t, UserTask) for r in read_task(t)
                  for s in ((r.sent1, r.sent2) if t.kind == "sts" else (r.text,))]
    return sts_inputs, transfer_inputs, sentences


def evaluate(encoder: Encoder, tasks="all", mode: str = "test", data_dir=None, seed: int = 1111,
             model_name: str | None = None, transfer_sample: int | None = None, sts_sample: int | None = None) -> dict:
    """Evaluate an encoder. Every distinct sentence of every task is encoded once, up front. `transfer_sample`: at
    most that many records per transfer split (cse_kit.eval.transfer.sample_records), `sts_sample` pairs per STS
    subset (cse_kit.eval.sts.sample_pairs): the smoke profile's."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    start, encode_before = time.perf_counter(), encoder.seconds  # the encoder's clock runs across calls
    tasks = parse_tasks(tasks) if isinstance(tasks, str) else tuple(tasks)
    sts_inputs, transfer_inputs, sentences = evaluation_inputs(tasks, mode, data_dir, transfer_sample, sts_sample)
    sts_tasks, transfer_tasks = list(sts_inputs), list(transfer_inputs)
    encoder.encode(sentences)
    encoded = time.perf_counter()
    encode_s = encoder.seconds - encode_before

    split = "dev" if mode == "dev" else "test"
    sts = {t: evaluate_sts_task(encoder, t, sts_inputs[t]) for t in sts_tasks}
    if sts:
        sts["avg"] = float(np.mean([headline(t, sts[t], split) for t in sts_tasks]))
    scored = time.perf_counter()
    transfer = {t: evaluate_transfer_task(encoder, transfer_inputs[t], mode, seed) for t in transfer_tasks}
    if transfer:
        key = "devacc" if mode == "dev" else "acc"
        transfer["avg"] = float(np.mean([transfer[t][key] for t in transfer_tasks]))
    own = {t.name: evaluate_user_task(encoder, t, seed) for t in tasks if isinstance(t, UserTask)}
    end = time.perf_counter()
    distinct = len(set(sentences))
    return {
        "model": model_name, "pooler": encoder.pooler, "amp": encoder.amp, "precision": encoder.precision,
        "mode": mode, "seed": seed,
        "transfer_sample": transfer_sample, "sts_sample": sts_sample,
        "sts": sts, "transfer": transfer, **({"own": own} if own else {}),
        "timings": {"encode_s": encode_s, "prepare_s": encoded - start - encode_s,
                    "sts_s": scored - encoded,
                    "transfer_classifier_s": sum(r["seconds"]["classifier"] for k, r in transfer.items() if k != "avg"),
                    "total_s": end - start, "distinct_sentences": distinct,
                    "sentences_per_s": distinct / encode_s if encode_s else None},
        "environment": describe(encoder.device),
    }


def _table(names: list[str], values: list[float]) -> str:
    widths = [max(len(n), 6) for n in names]
    head = " | ".join(n.rjust(w) for n, w in zip(names, widths))
    row = " | ".join(f"{v:.2f}".rjust(w) for v, w in zip(values, widths))
    return f"{head}\n{row}"


def format_tables(result: dict) -> str:
    """Paper-style tables (2 decimals; the JSON keeps the unrounded numbers)."""
    mode = result["mode"]
    split = "dev" if mode == "dev" else "test"
    lines = [f"model {result['model']}  pooler {result['pooler']}  mode {mode}"]
    sts = {k: v for k, v in result["sts"].items() if k != "avg"}
    if sts:
        names = [t for t in STS_TASKS if t in sts]
        lines += [f"STS ({'Spearman x100; STS12-16 `all`' if mode != 'dev' else 'dev Spearman x100'})",
                  _table(names + ["Avg."], [headline(t, sts[t], split) for t in names] + [result["sts"]["avg"]])]
    tr = {k: v for k, v in result["transfer"].items() if k != "avg"}
    if tr:
        key = "devacc" if mode == "dev" else "acc"
        names = [t for t in TRANSFER_TASKS if t in tr]
        lines += [f"Transfer ({'dev ' if mode == 'dev' else ''}accuracy)",
                  _table(names + ["Avg."], [tr[t][key] for t in names] + [result["transfer"]["avg"]])]
    own = result.get("own", {})
    if own:
        lines += ["Your tasks (STS: Spearman x100; classification: accuracy, 10-fold cross-validation)",
                  _table(list(own), [user_headline(r) for r in own.values()])]
    t = result["timings"]
    lines.append(f"encoded {t['distinct_sentences']} distinct sentences in {t['encode_s']:.1f} s; "
                 f"transfer classifiers {t['transfer_classifier_s']:.1f} s; total {t['total_s']:.1f} s")
    return "\n".join(lines)
