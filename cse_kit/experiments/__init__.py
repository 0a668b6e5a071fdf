"""What the table notebooks call: profile resolution, parameter checks, running a table's rows over seeds through
the results store, and the paper-vs-reproduced comparison. Notebooks hold parameters, calls and plots only."""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# tqdm.auto, imported by the libraries below, warns in a kernel without ipywidgets; the kit's bars are plain tqdm
warnings.filterwarnings("ignore", message="IProgress not found")

from ..data.published import paper_key, paper_table  # noqa: E402
from ..environment import stale_versions  # noqa: E402
from ..io import write_json_atomic  # noqa: E402
from ..progress import duration, progress, terminal_progress  # noqa: E402
from ..results import Pretrained, ResultStore, parallel  # noqa: E402
from ..train.presets import PROFILES, ProfileUnavailable, build_config, hub_models

#: What each profile's numbers are, printed at the top of every notebook and shown in the report.
PROFILE_NOTES = {
    "paper": "the papers' models (BERT/RoBERTa-base) and Wiki1M: comparable to the paper's numbers",
    "cpu": "all-MiniLM-L6-v2 trained briefly on a Wiki1M sample: real runs, NOT comparable to the paper's BERT-base",
    "mini": "Google's masked-LM BERT miniatures (BERT-Mini, 4 x 256, for BERT-base) trained with the papers' recipes on "
            "Wiki1M's first 11,913 sentences: the papers' premise (an MLM-pretrained start) in miniature, NOT comparable "
            "to the paper's BERT-base numbers",
    "mini-rehearsal": "the mini profile's miniatures at the smoke profile's sizes: checks the downloads and every code "
                      "path before a mini report, the numbers mean nothing",
    "smoke": f"tiny random models trained for seconds, transfer tasks on {PROFILES['smoke']['report']['transfer_sample']:,}"
             f" records per split, STS test on {PROFILES['smoke']['report']['sts_sample']} pairs per subset: checks the"
             " pipeline, the numbers mean nothing",
}


#: The profiles whose tables show, beside every trained row, its untrained start: the backbone evaluated as it is,
#: under the pooler the row's runs are evaluated with, and each cell's change from it. Their backbones are not the
#: papers' masked-LM checkpoints (cpu: a model already trained for similarity), so a number alone does not say whether
#: a method added anything; on `paper` the papers' own baselines say it.
STARTS_SHOWN = ("cpu", "mini", "mini-rehearsal", "smoke")
#: what the cpu profile can and cannot show, said once where its numbers are shown (the report's coverage)
CPU_PROFILE_SCOPE = (
    "The cpu profile starts from all-MiniLM-L6-v2, a model already trained for sentence similarity, not the papers' "
    "masked-LM checkpoints: it shows that every method runs and how far each moves that model from its untrained "
    "start under the method's own pooler (each table's 'start' line), not the papers' gains or their ranking; "
    "DiffAug's freshly initialised prefix costs it 17 STS-B dev points that the profile's 16 stage-2 steps do not "
    "win back")
#: where the evidence for CPU_PROFILE_SCOPE is, in the repository
CPU_PROFILE_EVIDENCE = "docs/training.md#what-the-cpu-profile-can-and-cannot-show"
#: profile -> (what it can and cannot show, said once where its numbers are shown; where the evidence is)
PROFILE_SCOPES = {
    "cpu": (CPU_PROFILE_SCOPE, CPU_PROFILE_EVIDENCE),
    "mini": ("The mini profile starts, as the papers do, from masked-LM checkpoints (Google's BERT miniatures): each "
             "table's 'start' line is the untrained miniature, so a row's change from it is what the method adds to "
             "an MLM start; at a tenth of BERT-base's width and on Wiki1M's first 11,913 sentences, its numbers are "
             "not the papers' and its ranking need not be theirs",
             "docs/training.md#the-mini-profile-the-papers-premise-in-miniature"),
}


class ParameterError(ValueError):
    """A notebook parameter that cannot run; raised in the first cell, before any training."""


def resolve_profile(profile: str) -> str:
    """`auto` is `paper` with a CUDA GPU; without one `mini` where its models are cached or the Hub answers, else
    `cpu` (auto_profile says why)."""
    if profile == "auto":
        return auto_profile()[0]
    if profile not in PROFILES:
        raise ParameterError(f"unknown profile {profile!r}; choose auto, {', '.join(PROFILES)}")
    return profile


def chosen_profile(profile: str, say=print) -> str:
    """The profile a command or notebook runs: `auto` resolved, saying which and why; stops, in one line naming them,
    where the profile's models can be had neither from the cache nor from the Hub (require_models)."""
    if profile == "auto":
        profile, why = auto_profile()
        say(why)
    profile = resolve_profile(profile)
    require_models(profile)
    return profile


def auto_profile() -> tuple[str, str]:
    """(the profile `auto` picks, one line saying which and why)."""
    import torch

    if torch.cuda.is_available():
        return "paper", "profile paper (auto: a CUDA GPU; --profile mini, cpu or smoke to choose another)"
    missing, unreachable = models_missing("mini")
    if not missing:
        why = "no CUDA GPU; the mini profile's masked-LM miniatures are in the Hugging Face cache"
    elif not unreachable:
        why = (f"no CUDA GPU; the Hub answers, so the mini profile's {len(missing)} miniature(s) not yet cached "
               "download on first use")
    else:
        return "cpu", (f"profile cpu (auto: no CUDA GPU, and the mini profile's miniatures are neither cached nor "
                       f"downloadable: {unreachable}; --profile mini once they are)")
    return "mini", f"profile mini (auto: {why}; --profile cpu or smoke to choose another)"


def models_missing(profile: str) -> tuple[list[str], str | None]:
    """(the Hub models the profile's runs load that are not in the Hugging Face cache, why the Hub cannot send them
    or None): the mini profile's miniatures, none on any other profile (paper's are checked run by run)."""
    from ..models import hub_unreachable, in_hub_cache, offline_mode

    missing = [ref for ref in hub_models(profile) if not in_hub_cache(ref)]
    if not missing:
        return [], None
    return missing, ("offline mode is on (HF_HUB_OFFLINE=1)" if offline_mode() else hub_unreachable())


def require_models(profile: str) -> None:
    """Stop, in one line naming them, when the profile's models are neither cached nor downloadable."""
    from ..models import ModelNotFoundError

    missing, unreachable = models_missing(profile)
    if missing and unreachable:
        raise ModelNotFoundError(
            f"the {profile} profile needs {', '.join(missing)}, which are not in the Hugging Face cache, and the Hub "
            f"cannot send them ({unreachable}): connect, or `hf download` them on a machine that can and copy its "
            "cache (~/.cache/huggingface/hub), or use --profile cpu")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ParameterError(message)


def sweep(values: list, single, name: str) -> list:
    """The swept values, or only `single` when it is set (papermill `-p lam 0.005`)."""
    chosen = list(values) if single is None else [single]
    check(len(chosen) > 0, f"no {name} values to run: give a non-empty list or a single value")
    return chosen


def _quiet() -> None:
    """Checkpoint load reports and save progress bars of every run would drown the notebook's own output. Through
    the variables transformers reads when first imported, unless it already is (a cell run again): a notebook whose
    runs are all finished never imports it, 3 to 5 CPU-seconds of every such kernel of a report."""
    import logging

    if "transformers" in sys.modules:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    else:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars and the Hub's, as above
    logging.getLogger("accelerate").setLevel(logging.ERROR)


#: said with every table and setup line of a store that evaluates under AMP ($CSE_KIT_EVAL_AMP=1, cse-kit report --amp)
AMP_NOTE = ("evaluated under AMP autocast (bf16 on a CPU with a bf16 unit; $CSE_KIT_EVAL_AMP=1), not the papers' fp32 "
            "protocol: each record says the precision it ran in")


@dataclass
class Setup:
    profile: str
    seeds: list[int]
    store: ResultStore
    workers: int = 1  # parallel workers for a table's pending runs (CSE_KIT_WORKERS; cse_kit.results.parallel)
    cluster: str = "local"
    #: key -> why, for the records this setup showed that other library versions computed (stale_note)
    stale: dict = field(default_factory=dict)

    def describe(self) -> str:
        workers = f"; {self.workers} workers ({self.cluster})" if parallel.uses_workers(self.workers, self.cluster) \
            else ""
        amp = f"; {AMP_NOTE}" if self.store.amp else ""
        return f"profile: {self.profile} ({PROFILE_NOTES[self.profile]}); seeds: {self.seeds}{workers}{amp}"


def _assigned(source: str) -> dict[str, str | None]:
    """The names a cell assigns at its top level -> their annotation's name (`lams: list = ...` -> "list"; None
    when not annotated)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node.annotation.id if isinstance(node.annotation, ast.Name) else None
    return names


def as_list(name: str, value):
    """papermill's `-p seeds [1,2]` injects the text "[1,2]" (only -y parses YAML): a list parameter given as text is
    read as YAML, so both spellings work; text that is not a list is refused with the spelling that is."""
    import yaml

    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = None
    check(isinstance(parsed, list), f"notebook parameter {name} is a list, got the text {value!r}; pass it as "
                                    f"-p {name} '[a, b]' or -y '{name}: [a, b]'")
    return parsed


def check_parameters() -> None:
    """A notebook's first call, before it reads its parameters. papermill injects every `-p name value` as a cell
    right after the tagged `parameters` cell, whatever the name, so a misspelt one (`-p lamda 0.1`) would leave the
    default sweep to run. The kernel's input history holds both cells: a name the injected cell sets that the
    parameters cell does not declare is refused. A list parameter injected as text is parsed (as_list)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    cells = list(shell.user_ns.get("In", [])) if shell is not None else []
    injected = [i for i, cell in enumerate(cells) if i > 0 and cell.lstrip().startswith("# Parameters")]
    if not injected:
        return
    declared, given = _assigned(cells[injected[-1] - 1]), _assigned(cells[injected[-1]])
    unknown = sorted(set(given) - set(declared))
    check(not unknown, f"unknown notebook parameter(s) {unknown}; this notebook takes: {', '.join(sorted(declared))} "
                       "(`papermill --help-notebook NOTEBOOK` lists them with their help)")
    for name in given:
        if declared[name] == "list":
            shell.user_ns[name] = as_list(name, shell.user_ns.get(name))


def setup(profile: str = "auto", seeds: list | None = None, data_dir: str = "", results_dir: str = "",
          force: bool = False, default_seeds: dict | None = None) -> Setup:
    """The first cell's call: resolves the profile and the seeds (when empty, `default_seeds[profile]` or the
    profile's report seeds) and opens the results store. Prints the profile, which every number is recorded with."""
    _quiet()
    profile = chosen_profile(profile)
    seeds = list(seeds) if seeds else list((default_seeds or {}).get(profile, PROFILES[profile]["report"]["seeds"]))
    check(all(isinstance(s, int) for s in seeds), f"seeds must be integers, got {seeds}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    check(not repeated, f"seeds {seeds} repeat {repeated}: each seed is one run, a repeat would count it twice in "
                        "the mean and std; give distinct seeds")
    workers, cluster = parallel.settings()
    check(not (force and parallel.uses_workers(workers, cluster)),
          f"force=True recomputes every run in this kernel, one at a time, never in workers, yet "
          f"{parallel.WORKERS_ENV}/{parallel.CLUSTER_ENV} ask for workers: unset them to recompute here, or delete "
          "the records to recompute (<results_dir>/records/<key>.json) and run without force to have workers "
          "compute them")
    store = ResultStore(results_dir or None, data_dir or None, force=force, notify=progress, status=terminal_progress,
                        cuda=parallel.jobs_get_gpus(profile, cluster))
    out = Setup(profile, seeds, store, workers, cluster)
    print(out.describe())
    return out


#: appended to a paper row's label for the row that evaluates the authors' released checkpoint of that row
RELEASED_SUFFIX = " (released checkpoint)"


@dataclass
class Row:
    """One row of a paper table: a preset with overrides (trained), or a pretrained model evaluated as it is."""

    label: str
    preset: str | None = None
    overrides: dict = field(default_factory=dict)
    model: str | None = None  # Pretrained: a model reference on this profile
    pooler: str | None = None
    unavailable: str | None = None  # why this profile cannot run the row, when known up front
    missing: str = ""  # what the row lacks on it (a checkpoint), named once in the report's reason

    def subject(self, profile: str, seed: int):
        if self.unavailable:
            raise ProfileUnavailable(self.unavailable, self.missing)
        if self.preset is None:
            return Pretrained(self.model, self.pooler, profile)
        return build_config(self.preset, profile, {**self.overrides, "seed": seed})


#: how a start row is labelled, and the prefix of the long table's columns that hold a trained row's start values
START_LABEL = "untrained {model} ({pooler})"
START_COLUMN = "start: "


def starting_point(row: Row, s: Setup) -> Row | None:
    """The untrained start of a trained row on a profile that shows starts (STARTS_SHOWN): its backbone evaluated as it
    is under the pooler its runs are evaluated with (a prompt pooler with the template the untrained model is read
    in: PromptBERT's BERT template, which every cpu row uses). None for a pretrained row, a row the profile cannot
    run, or a prompt row in another template."""
    from ..eval.prompt import PROMPTBERT_BERT

    if s.profile not in STARTS_SHOWN or row.preset is None or row.unavailable:
        return None
    try:
        cfg = row.subject(s.profile, s.seeds[0])
    except ProfileUnavailable:
        return None
    if cfg.pooler.startswith("prompt_") and (cfg.template or PROMPTBERT_BERT) != PROMPTBERT_BERT:
        return None
    return Row(START_LABEL.format(model=cfg.model, pooler=cfg.pooler), model=cfg.model, pooler=cfg.pooler)


def _seeds(row: Row, s: Setup) -> list[int]:
    return s.seeds if row.preset else s.seeds[:1]  # a pretrained model evaluated as is: deterministic, run once


def _compute_in_parallel(plan: list, s: Setup, evals: tuple) -> None:
    """With workers, the planned rows' pending runs are computed by them first; the caller then only reads records.
    (setup refuses force with workers: recomputing "once" is a promise of one process.)"""
    if not parallel.uses_workers(s.workers, s.cluster):
        return
    parallel.compute_all(s.store, [(subject, evals) for _, subjects, _ in plan for _, subject in subjects],
                         s.workers, s.cluster)


def _plan(rows: list[Row], s: Setup) -> list[tuple[Row, list, ProfileUnavailable | None]]:
    """(row, [(seed, subject)], why the profile cannot run it or None) per row."""
    plan = []
    for row in rows:
        try:
            plan.append((row, [(seed, parallel.for_workers(row.subject(s.profile, seed), s.cluster))
                               for seed in _seeds(row, s)], None))
        except ProfileUnavailable as err:
            plan.append((row, [], err))
    return plan


def _fetch(rows: list[Row], s: Setup, evals: tuple) -> list[tuple[Row, list[tuple[int, dict]], ProfileUnavailable | None]]:
    """(row, [(seed, record)], why the profile cannot run it or None) per row: records reused where finished, computed
    where not. Says how many runs are finished and how many to compute, then a line before and after each."""
    plan = _plan(rows, s)
    _compute_in_parallel(plan, s, evals)
    keys = {id(subject): s.store.key(subject) for _, subjects, _ in plan for _, subject in subjects}
    runs = set(keys.values())  # rows may share runs
    pending = {k for k in runs if s.store.force or not s.store.has_key(k, evals)}
    total = len(pending)
    progress(f"{len(runs)} run{'' if len(runs) == 1 else 's'}: {len(runs) - total} finished, computing {total}")
    out, spent = [], 0.0
    for row, subjects, unavailable in plan:
        found = []
        for seed, subject in subjects:
            key = keys[id(subject)]
            computing = key in pending
            pending.discard(key)
            if computing:
                progress(f"run {total - len(pending)}/{total}: {row.label}, seed {seed}")
                start = time.perf_counter()
            found.append((seed, s.store.get(subject, evals)))
            if computing:
                took, done = time.perf_counter() - start, total - len(pending)
                spent += took
                left = f", about {duration(spent / done * len(pending))} left for the others" if pending else ""
                progress(f"run {done}/{total}: done in {duration(took)}{left}")
        out.append((row, found, unavailable))
    _mark_stale([record for _, found, _ in out for _, record in found], s)
    return out


def _mark_stale(found: list[dict], s: Setup) -> None:
    """Say, in the notebook, which of the records just shown other library versions computed; the table's saved
    notes say it too (save_table), so the report shows it beside the table."""
    stale = {record["key"]: why for record in found if (why := stale_versions(record.get("environment") or {}))}
    if stale and set(stale) - set(s.stale):
        s.stale.update(stale)
        print(stale_note(s.stale))


def stale_note(stale: dict[str, list[str]]) -> str:
    """One line: how many runs are another environment's, why, and the commands that list and recompute them."""
    reasons = sorted({why for whys in stale.values() for why in whys})
    runs = f"{len(stale)} run{'' if len(stale) == 1 else 's'}"
    return (f"stale: {runs} of this table {'was' if len(stale) == 1 else 'were'} {'; '.join(reasons)} "
            "(`cse-kit status --stale` lists them, `cse-kit report --recompute-stale` recomputes them)")


def run_rows(rows: list[Row], s: Setup, evals: tuple, metrics, starts: bool = True,
             start_metrics=None) -> pd.DataFrame:
    """Long table: one line per (row, seed) with status, reason (and what the row is missing) and the columns
    metrics(record) returns. Pretrained rows are deterministic and run once. Rows the profile cannot run are kept,
    marked `not run`. With `starts`, on a profile that shows them, each trained row's lines also hold its untrained
    start (starting_point): `start`, the start's label, and `start: <column>` for each column start_metrics (default
    metrics) reads off the start's record, computed and cached in the results store like any other; a table of
    what only training has (cost, curves) passes starts=False."""
    start_of = {row.label: starting_point(row, s) for row in rows} if starts else {}
    start_rows = list({start.label: start for start in start_of.values() if start}.values())
    fetched = _fetch(list(rows) + start_rows, s, evals)
    read = start_metrics or metrics
    start_values = {row.label: {START_COLUMN + k: v for k, v in read(found[0][1]).items()}
                    for row, found, _ in fetched[len(rows):] if found}
    lines = []
    for row, found, unavailable in fetched[:len(rows)]:
        if unavailable:
            lines.append({"row": row.label, "seed": s.seeds[0], "status": "not run", "reason": unavailable.cause,
                          "missing": unavailable.missing})
        start = start_of.get(row.label)
        shown = {"start": start.label, **start_values[start.label]} if start and start.label in start_values else {}
        lines += [{"row": row.label, "seed": seed, "status": "ok", "reason": "", "missing": "", "key": record["key"],
                   **metrics(record), **shown} for seed, record in found]
    return pd.DataFrame(lines)


def best_on_dev(long: pd.DataFrame, groups: dict[str, list[str]], dev_column: str) -> tuple[pd.DataFrame, dict]:
    """Model selection over candidate rows (a sweep of one setting, e.g. DiffAug Table 6's α): for each group, the
    candidate with the highest mean `dev_column` over its finished seeds. Returns the long table with each group's
    chosen candidate relabelled to the group where its candidates were (the others dropped; rows of no group kept)
    and {group: the chosen candidate's label, or None when none finished}."""
    ok = long[long.status == "ok"]
    means = ok.groupby("row", sort=False)[dev_column].mean() if dev_column in ok else pd.Series(dtype=float)
    chosen = {}
    for group, candidates in groups.items():
        finished = [c for c in candidates if c in means.index and not math.isnan(means[c])]
        chosen[group] = max(finished, key=lambda c: means[c]) if finished else None
    group_of = {c: g for g, candidates in groups.items() for c in candidates}
    # nothing finished: one candidate's lines stay, for their reason
    keep = {chosen[g] or candidates[0] for g, candidates in groups.items()}
    lines = long[[row not in group_of or row in keep for row in long.row]]
    return lines.assign(row=[group_of.get(row, row) for row in lines.row]).reset_index(drop=True), chosen


def records(rows: list[Row], s: Setup, evals: tuple) -> dict[str, list[dict]]:
    """label -> the records of its seeds (rows the profile cannot run are left out; run_rows reports them)."""
    return {row.label: [record for _, record in found] for row, found, unavailable in _fetch(rows, s, evals)
            if not unavailable}


# --- record -> table columns -------------------------------------------------------------------------------------
STS_COLUMNS = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
               "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
TRANSFER_COLUMNS = {"MR": "MR", "CR": "CR", "SUBJ": "SUBJ", "MPQA": "MPQA", "SST2": "SST", "TREC": "TREC",
                    "MRPC": "MRPC"}


def sts_test_columns(record: dict) -> dict:
    sts = record["metrics"]["sts_test"]
    out = {col: (sts[t]["all"]["spearman"] if "all" in sts[t] else sts[t]["test"]["spearman"])
           for t, col in STS_COLUMNS.items()}
    return {**out, "Avg.": sts["avg"]}


def transfer_test_columns(record: dict) -> dict:
    name = next(k for k in ("transfer_test", "transfer_fasttest") if k in record["metrics"])
    tr = record["metrics"][name]
    return {**{col: tr[t]["acc"] for t, col in TRANSFER_COLUMNS.items()}, "Avg.": tr["avg"]}


def dev_columns(record: dict) -> dict:
    out = {"STS-B": record["metrics"]["sts_dev"]["STSBenchmark"]["dev"]["spearman"]}
    if "transfer_dev" in record["metrics"]:
        out["Avg. transfer"] = record["metrics"]["transfer_dev"]["avg"]
    return out


def retrieval_columns(record: dict) -> dict:
    r = record["metrics"]["geometry"]["retrieval"]
    return {f"@{k}": r[f"recall@{k}"] for k in (1, 5, 10)}


def geometry_columns(record: dict) -> dict:
    g = record["metrics"]["geometry"]["align_uniform"]
    return {"Alignment": g["alignment"], "Uniformity": g["uniformity"], "STS": record["metrics"]["sts_test"]["avg"]}


def training_cost(record: dict) -> tuple[float, float, bool]:
    """(training seconds per step, stage-1 and main steps alike, evaluation left out; peak memory in bytes, the
    GPU's on CUDA and the process's resident memory elsewhere (NaN where unknown); whether it is the GPU's)."""
    train = record["train"]
    gpu = train.get("peak_gpu_memory_bytes")
    return (record["timings"]["train_train_s"] / train["steps"], gpu or train.get("peak_rss_bytes") or math.nan,
            bool(gpu))


def transfer_eval(profile: str) -> str:
    """The transfer evaluation a profile reports test accuracy with (the papers: SentEval's `test` config)."""
    return f"transfer_{PROFILES[profile]['report']['transfer_mode']}"


# --- paper vs reproduced ------------------------------------------------------------------------------------------
def compare(long: pd.DataFrame, table: int | str, columns: list[str], cell=None, paper: str = "diffcse") -> pd.DataFrame:
    """One line per (row, column): the paper's value (`paper`'s Table `table`), mean ± std over seeds, n, and the
    difference.
    cell(row, column) -> (paper row, paper column) says where the paper's value is (default: the same labels;
    sweeps such as Table 8 put our rows in the paper's columns; a released checkpoint's row is compared with the row it
    stands for). Cells the paper lacks show NaN."""
    published = paper_table(table, paper)
    cell = cell or (lambda row, column: (row.removesuffix(RELEASED_SUFFIX), column))
    out = []
    for label, group in long.groupby("row", sort=False):
        for col in columns:
            prow, pcol = cell(label, col)
            ref = (float(published.loc[prow, pcol]) if prow in published.index and pcol in published.columns
                   and published.loc[prow, pcol] is not None else math.nan)
            ours = _over_seeds(group, col)
            out.append(_line(label, col, ref, ours, ours["mean"] - ref))
    return pd.DataFrame(out)


def _over_seeds(group: pd.DataFrame, column: str) -> dict:
    """mean, std (ddof 1), n of one column over a row's finished runs, and why there are none; with the row's
    untrained start where run_rows gave it one (`start`: its label, `start_value`: its value in this column)."""
    ok = group[group.status == "ok"]
    values = ok[column].dropna().to_numpy(float) if column in ok else np.array([])
    return {"mean": float(values.mean()) if len(values) else math.nan,
            "std": float(values.std(ddof=1)) if len(values) > 1 else math.nan, "n": len(values),
            **(why_not_run(group) if not len(values) else {"reason": "", "missing": ""}), **_start_of(ok, column)}


def _start_of(ok: pd.DataFrame, column: str) -> dict:
    """{"start": label, "start_value": value} of a row's untrained start in one column, or {} without one."""
    if START_COLUMN + column not in ok or "start" not in ok:
        return {}
    known = ok[ok[START_COLUMN + column].notna()]
    return {"start": known["start"].iloc[0], "start_value": float(known[START_COLUMN + column].iloc[0])} \
        if len(known) else {}


def why_not_run(group: pd.DataFrame) -> dict:
    """reason and missing of a row none of whose lines ran (each the row's one value, or its values joined)."""
    return {column: "; ".join(sorted({str(v) for v in group[column].fillna("") if v})) if column in group else ""
            for column in ("reason", "missing")}


def _line(row: str, column: str, paper: float, ours: dict, diff: float) -> dict:
    start = {"start": ours["start"], "start_value": ours["start_value"],
             "from_start": ours["mean"] - ours["start_value"]} if "start" in ours else {}
    return {"row": row, "column": column, "paper": paper, "mean": ours["mean"], "std": ours["std"], "n": ours["n"],
            "diff": diff, "reason": ours["reason"], "missing": ours.get("missing", ""), **start}


def unpublished(long: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """compare's layout for a figure whose paper gives no numbers (only a shape): mean ± std over seeds, paper NaN."""
    return pd.DataFrame([_line(label, col, math.nan, _over_seeds(group, col), math.nan)
                         for label, group in long.groupby("row", sort=False) for col in columns])


def side_by_side(table: int | str, ours: dict[str, dict], paper_row=None, paper: str = "diffcse",
                 tolerance: float | None = None, unit: str = "") -> pd.DataFrame:
    """Values that are not measured over seeds (hyper-parameters, parameter counts: one each) beside the paper's,
    in compare's layout, each line marked `setting` (shown as a plain value, no "(n=1)"). ours: row -> column ->
    value; paper_row(row) names the paper's row (default: the same); `tolerance` (0: must match exactly, shown
    "same" / "differs") and `unit` (a suffix of both numbers in a cell, e.g. "M") travel with the lines to the report."""
    published = paper_table(table, paper)
    paper_row = paper_row or (lambda row: row)
    lines = []
    for row, values in ours.items():
        for column, value in values.items():
            ref = float(published.loc[paper_row(row), column])
            ours = {"mean": float(value), "std": math.nan, "n": 1, "reason": "", "missing": ""}
            lines.append({**_line(row, column, ref, ours, ours["mean"] - ref), "setting": True,
                          **({"unit": unit} if unit else {}),
                          **({} if tolerance is None else {"tolerance": float(tolerance)})})
    return pd.DataFrame(lines)


def with_paper(comparison: pd.DataFrame, values: dict[tuple[str, str], float]) -> pd.DataFrame:
    """unpublished()'s lines with the few cells a paper gives in its text (row, column) -> value, Δ beside them
    (SCD Figure 2: only SCD's own point)."""
    paper = [values.get((line.row, line.column), line.paper) for line in comparison.itertuples()]
    return comparison.assign(paper=paper, diff=comparison["mean"] - paper)


def sweep_cell(paper_row: str):
    """For sweep tables (7, 8): our row `0.005` is the paper's column `0.005` of its single row."""
    return lambda row, column: (paper_row, row)


def show(comparison: pd.DataFrame, caption: str, tolerance: float | None = None):
    """The comparison in the paper's layout, each cell the paper's number, ours and Δ, Δ coloured by the metric's tolerance
    (`tolerance` overrides it for every cell, e.g. 0 for hyper-parameters that must match exactly)."""
    from .render import Shown

    if tolerance is not None:
        comparison = comparison.assign(tolerance=tolerance)
    return Shown(comparison, caption)


def show_values(frame: pd.DataFrame, caption: str = "", together: bool = False):
    """Any other table a notebook shows (the paper's cited rows, per-group means, examples): numbers through
    render.column_formatter, each column's digits from its spread (`together`: one spread for all its columns), a
    named index as the first column. A notebook displays no raw frame."""
    from .render import ShownValues

    return ShownValues(frame, caption, together)


def save_table(s: Setup, name: str, title: str, comparison: pd.DataFrame | None = None, figures=(), notes=(),
               extra: dict | None = None, paper: str = "diffcse") -> None:
    """What the report shows for one notebook, written atomically to results_dir/tables/<name>.json: the paper,
    the comparison, the figures as PNG data URIs, notes, the profile and seeds. Returns nothing, so a notebook's last
    cell shows no machine path (the report page is meant to be shared)."""
    from ..environment import describe
    from .plots import to_data_uri

    table = strict_json({"name": name, "paper": paper_key(paper) if paper else None, "title": title,
                         "profile": s.profile, "profile_note": PROFILE_NOTES[s.profile], "seeds": s.seeds,
                         "notes": list(notes) + ([AMP_NOTE] if s.store.amp else [])
                         + ([stale_note(s.stale)] if s.stale else []),
                         "figures": [to_data_uri(f) for f in figures],
                         "comparison": [] if comparison is None else json.loads(comparison.to_json(orient="records")),
                         "extra": extra or {}, "extra_layout": extra_layout(extra or {}),
                         "environment": describe(), "evaluation_amp": s.store.amp,
                         "written": time.strftime("%Y-%m-%dT%H:%M:%S")})
    write_json_atomic(s.store.root / "tables" / f"{name}.json", table)
    _publish(table)


def extra_layout(extra: dict) -> dict:
    """The order of the extra tables and of each one's columns, as the notebook made them: the display message that
    carries the table to the report has its keys sorted on the way (nbformat), which put a table's `method` column
    fifth and its `cost` table before its `scores`."""
    tables = extra.get("tables", {})
    columns = {caption: list(dict.fromkeys(k for record in records for k in record))
               for caption, records in tables.items()}
    return {"tables": list(tables), "columns": columns}


def strict_json(value):
    """value with every NaN and infinity (a row the profile could not run, in an extra table) as None: the table is
    sent to the notebook as a display message, which must be strict JSON (jupyter_client's json packer refuses NaN,
    falls back and warns that such messages are deprecated; a future client may drop them)."""
    return json.loads(json.dumps(value), parse_constant=lambda _: None)


#: The MIME type under which a notebook hands its table to the report (read back from the executed notebook).
TABLE_MIMETYPE = "application/vnd.cse-kit.table+json"


def _publish(table: dict) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display({TABLE_MIMETYPE: table}, raw=True)
