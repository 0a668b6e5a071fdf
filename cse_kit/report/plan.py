"""`cse-kit report --plan`: the report's bill before it is spent. Every training run the selected notebooks need on a
profile (their default parameters: seeds, grids, subsets), its steps and its hours from measured step times
(cse_kit.report.step_times), per notebook and in all, and the wall time on N workers (`--workers N`: GPUs, or SLURM
jobs with `--cluster slurm`). Nothing is trained, evaluated or executed; only the results store is read, to leave
out what it holds.

What each notebook asks for (NEEDS, cse_kit.report.needs) is its run_rows / records calls written out with the
same row builders the notebook calls (cse_kit.papers.*) and its parameters' defaults read from its `parameters` cell;
each row becomes its runs through experiments.rows.plan_rows, the function the notebooks' own calls use (seeds, the
SLURM precision, the rows a profile cannot run), so the keys are the ones the report would train and store. A run two
notebooks share is trained once: by the first of them in the report's order, where it is billed. A run's steps are the
training loop's (train.setup.stage_steps, given the corpus's recorded size: cse_kit.data.registry), its seconds those
steps at the measured step time, its dev evaluations and its checkpoints.

Known before the notebooks run only as estimates, and said so: DiffAug's `_joint` α (chosen on STS-B dev: counted at
the first grid point until the store holds every candidate), the equal-budget studies' trials and chosen
configurations (the recipe's steps; trials a study already holds are read from it), runs batched within length
buckets (at most the unbucketed steps), WikiText-103's pairs (not recorded), early stopping (not counted)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace

from .needs import NEEDS, Context, notebook_defaults

#: WikiText-103's (sentence, next sentence) pairs as the kit's converter cuts its train split, where the data
#: folder lacks it: 103,227,021 tokens (Merity et al. 2016) at about 25 tokens a sentence. An estimate, said so.
WIKITEXT_PAIRS_ESTIMATE = 4_100_000


# --- a run's steps --------------------------------------------------------------------------------------------------
_COUNTED: dict = {}


def _loaded_count(source: str, data_dir) -> int:
    """Examples of a training source the registry does not count (SNLI-triplets, STS-texts, a file of one's own),
    read from the data once per process."""
    from ..train.data import load_examples

    key = (source, str(data_dir))
    if key not in _COUNTED:
        _COUNTED[key] = len(load_examples(source, data_dir))
    return _COUNTED[key]


def _ordered_pairs(source: str, data_dir) -> tuple[int, str | None]:
    """(sentence, next sentence) pairs of an ordered corpus: recorded, counted from the data folder, or (WikiText-103
    absent) estimated."""
    from ..data import resolve_data_dir
    from ..data.registry import REGISTRY

    spec = REGISTRY[source]
    if "pairs" in spec.counts:
        return spec.counts["pairs"], None
    path = resolve_data_dir(data_dir) / spec.group / spec.files[0]
    if path.is_file():
        return _loaded_count(source, data_dir), None
    return WIKITEXT_PAIRS_ESTIMATE, (f"{source}'s pairs estimated at {WIKITEXT_PAIRS_ESTIMATE:,} (not in the data "
                                     "folder, and no count recorded)")


def training_examples(cfg, data_dir=None) -> tuple[int, str | None]:
    """(the examples a run trains on, as the loop loads them: train.setup.training_data; why an estimate or None),
    from the counts the registry records where it does, else from the data."""
    from ..data.registry import ORDERED_CORPORA, REGISTRY, is_nli
    from ..train.data import subsample_examples

    why = None
    if cfg.data in ORDERED_CORPORA:
        n, why = _ordered_pairs(cfg.data, data_dir)
    elif cfg.data in REGISTRY and "train" in REGISTRY[cfg.data].counts:
        n = REGISTRY[cfg.data].counts["train"]
    else:
        n = _loaded_count(cfg.data, data_dir)
    if is_nli(cfg.data):
        n = len(subsample_examples(range(n), cfg.nli_fraction, cfg.nli_subset))
    return (min(n, cfg.max_examples) if cfg.max_examples else n), why


def run_steps(cfg, data_dir=None) -> tuple[int, int, list[str]]:
    """(first-stage steps, main steps, what is estimated) of a run, as the loop counts them
    (train.setup.stage_steps)."""
    from ..methods.registry import method_class
    from ..train.setup import stage_steps

    examples, why = training_examples(cfg, data_dir)
    notes = [why] if why else []
    if cfg.length_buckets:
        notes.append("length buckets: at most the unbucketed steps (each bucket drops its remainder)")
    if examples < cfg.batch_size:  # Batches refuses it: the run stops before its first step
        return 0, 0, notes + [f"{cfg.preset}: {examples} examples for a batch of {cfg.batch_size}: the run fails"]
    method = method_class(cfg.method)
    objective = method if cfg.semi_strategy == "none" else SimpleNamespace(two_stages=True, stage1_own_schedule=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a stage 1 longer than the main stage: the loop warns, the plan counts
        try:
            first, main = stage_steps(cfg, examples // cfg.batch_size, objective)
        except ValueError as err:  # gradient accumulation over too few batches: the loop stops there too
            return 0, 0, notes + [f"{cfg.preset}: {err}: the run fails"]
    return first, main, notes


def dev_evaluations(cfg, total: int) -> int:
    """Dev evaluations of a run of `total` steps: every eval_steps steps and at the last (train.loop's
    evaluation_due), plus each epoch's end with eval_epoch_end."""
    count = total // cfg.eval_steps + (1 if total % cfg.eval_steps else 0)
    return count + (cfg.epochs if cfg.eval_epoch_end else 0)


# --- the bill -------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One run the report needs: trained (a TrainConfig) or evaluated as it is (a Pretrained)."""

    key: str
    subject: object
    label: str
    seed: int | None
    notebook: str  # the first notebook of the report that needs it: it trains it
    call: int  # which of that notebook's calls
    evals: dict = field(default_factory=dict)  # evaluation -> (notebook, call) that first asks for it
    trained: bool = False  # its training is in the store
    held: set = field(default_factory=set)  # the evaluations the store holds
    known: bool = True  # False: a study's run, keyed only when it runs
    free: set = field(default_factory=set)  # evaluations computed with another from the same encodings
    stage1: int = 0
    main: int = 0
    seconds: float = 0.0  # training, dev evaluations and checkpoints
    estimated: list = field(default_factory=list)

    @property
    def trains(self) -> bool:
        return self.main > 0

    def pending_evals(self) -> list[str]:
        return [e for e in self.evals if e not in self.held]


@dataclass
class Plan:
    profile: str
    names: list
    seeds: list
    runs: dict  # key -> Run, in the order first needed
    asked: dict  # notebook -> [set of keys each call asks for]
    unavailable: dict  # notebook -> rows the profile cannot run
    notes: dict  # notebook -> its notes
    store_root: str
    workers: int = 1
    cluster: str = "local"


def plan(profile: str, names: list[str], results_dir=None, data_dir=None, workers: int = 1,
         cluster: str = "local") -> Plan:
    """Every run the notebooks `names` (in the report's order) need on `profile`, each with what the store holds of
    it. Reads notebooks' parameters and the store; trains, evaluates and executes nothing."""
    from ..experiments import STARTS_SHOWN, Setup, starting_point
    from ..experiments.rows import plan_rows
    from ..results import ResultStore, parallel
    from ..results.evaluations import evaluation_name
    from ..train.config import TrainConfig
    from ..train.presets import PROFILES

    missing = [n for n in names if n not in NEEDS]
    if missing:
        raise ValueError(f"the plan does not know what notebook(s) {', '.join(missing)} train: add them to "
                         "cse_kit/report/needs.py's NEEDS")
    store = ResultStore(results_dir, data_dir, cuda=parallel.jobs_get_gpus(profile, cluster))
    seeds = list(PROFILES[profile]["report"]["seeds"])
    runs, asked, unavailable, notes = {}, {}, {}, {}
    for name in names:
        context = Context(profile, notebook_defaults(name), Setup(profile, seeds, store, workers, cluster))
        asked[name], unavailable[name], notes[name] = [], [], []
        for call, need in enumerate(NEEDS[name](context)):
            s = Setup(profile, need.seeds or seeds, store, workers, cluster)
            rows = list(need.rows)
            if need.starts and profile in STARTS_SHOWN:
                rows += list({start.label: start for row in need.rows if (start := starting_point(row, s))}.values())
            keys = set()
            for row, subjects, why in plan_rows(rows, s):
                if why is not None:
                    unavailable[name].append(f"{row.label}: {why}")
                for seed, subject in subjects:
                    key = store.key(subject)
                    run = runs.setdefault(key, Run(key, subject, row.label, seed, name, call))
                    for e in need.evals:
                        run.evals.setdefault(evaluation_name(e), (name, call))
                    keys.add(key)
            for label, subject in need.runs:
                key = store.key(parallel.for_workers(subject, cluster))
                run = runs.setdefault(key, Run(key, subject, label, subject.seed, name, call))
                for e in need.evals:
                    run.evals.setdefault(evaluation_name(e), (name, call))
                keys.add(key)
            for label, subject, count in need.unknown:
                for i in range(count):
                    key = f"{name}:{call}:{label}:{i}"
                    runs[key] = Run(key, subject, label, None, name, call, known=False)
                    runs[key].evals = {evaluation_name(e): (name, call) for e in need.evals}
                    keys.add(key)
            asked[name].append(keys)
            notes[name] += need.notes
    for run in runs.values():
        if run.known:
            record = store.read(run.key) if store.has_key(run.key, ()) else None
            run.trained = record is not None
            run.held = set(record["metrics"]) if record else set()
    _with_shared_encodings(runs, names, profile)
    for run in runs.values():
        if isinstance(run.subject, TrainConfig) and not run.trained:
            run.stage1, run.main, run.estimated = run_steps(run.subject, store.data_dir)
    return Plan(profile, names, seeds, runs, asked, unavailable, notes, str(store.root), workers, cluster)


def _with_shared_encodings(runs: dict, names: list[str], profile: str) -> None:
    """Where the store computes an evaluation's companions with it from the same encodings (results.evaluations'
    with_shared_encodings: the STS test's per-pair cosines, where the profile evaluates the STS test sets whole),
    the companion comes with it, when the evaluation is asked first (or with it): at no cost of its own."""
    from ..results.evaluations import SHARED_ENCODINGS
    from ..results.identity import evaluation_sample

    if evaluation_sample(profile, "sts_sample") is not None:
        return
    place = {name: i for i, name in enumerate(names)}

    def order(at):
        return place[at[0]], at[1]

    for run in runs.values():
        for name, companions in SHARED_ENCODINGS.items():
            if name not in run.evals or name in run.held:
                continue
            for companion in companions:
                if companion not in run.held and (companion not in run.evals
                                                  or order(run.evals[name]) <= order(run.evals[companion])):
                    run.evals[companion] = run.evals[name]
                    run.free.add(companion)


def price(p: Plan, figures) -> None:
    """Each run to train priced: its steps at the figures' step times, its dev evaluations and checkpoints."""
    for run in p.runs.values():
        if not run.trains:
            continue
        cfg = run.subject
        first, why1 = figures.step_seconds(cfg, 1) if run.stage1 else (0.0, None)
        main, why2 = figures.step_seconds(cfg, 2)
        train = run.stage1 * first + run.main * main
        evals = dev_evaluations(cfg, run.stage1 + run.main) * figures.dev_eval_seconds(cfg)
        every = (cfg.save_steps and (run.stage1 + run.main) // cfg.save_steps) or \
            int((train + evals) // (60 * cfg.checkpoint_minutes))
        run.seconds = train + evals + every * figures.checkpoint_seconds()
        run.estimated += [w for w in (why1, why2) if w and w not in run.estimated]


def longest_first(durations: list[float], workers: int) -> float:
    """The makespan of `durations` scheduled longest first onto `workers` workers, each job to the first worker
    free (greedy list scheduling, LPT: at most 4/3 of the best schedule)."""
    import heapq

    if not durations:
        return 0.0
    loads = [0.0] * max(1, min(workers, len(durations)))
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


def bill(p: Plan, figures) -> dict:
    """The plan priced: per notebook and in all, the runs it needs, those an earlier notebook trains, those the
    store holds, those to train, their steps and hours; the final evaluations still to run (hours where the figures
    time them); the wall time on p.workers workers. Machine-readable (`--json`); text() prints it."""
    from ..results import parallel
    from ..train.config import TrainConfig

    price(p, figures)
    workers = p.workers if parallel.uses_workers(p.workers, p.cluster) else 1
    lines, all_tasks, untimed = [], [], {}
    for name in p.names:
        needed = set().union(*p.asked[name]) if p.asked[name] else set()
        trained = [p.runs[k] for k in needed if isinstance(p.runs[k].subject, TrainConfig)]
        own = [r for r in trained if r.notebook == name]
        to_train = [r for r in own if not r.trained]
        evaluations, eval_seconds, wall = {}, 0.0, 0.0
        for call, keys in enumerate(p.asked[name]):
            tasks = []
            for key in keys:
                run = p.runs[key]
                seconds = run.seconds if run.notebook == name and run.call == call and not run.trained else 0.0
                for e in run.pending_evals():
                    if run.evals[e] == (name, call) and e not in run.free:
                        evaluations[e] = evaluations.get(e, 0) + 1
                        timed = figures.evaluation_seconds(e)
                        if timed is None:
                            untimed[e] = untimed.get(e, 0) + 1
                        else:
                            seconds += timed
                            eval_seconds += timed
                if seconds:
                    tasks.append(seconds)
            wall += longest_first(tasks, workers)
            all_tasks += tasks
        estimated = sorted({w for r in to_train for w in r.estimated})
        lines.append({"notebook": name, "runs": len(trained), "earlier": len(trained) - len(own),
                      "stored": len(own) - len(to_train), "to_train": len(to_train),
                      "steps": sum(r.stage1 + r.main for r in to_train),
                      "train_hours": sum(r.seconds for r in to_train) / 3600,
                      "evaluations": evaluations, "evaluation_hours": eval_seconds / 3600,
                      "wall_hours": wall / 3600, "estimated": estimated,
                      "not_run_rows": len(p.unavailable[name]), "notes": p.notes[name]})
    keys = ("runs", "earlier", "stored", "to_train", "steps", "train_hours", "evaluation_hours", "wall_hours",
            "not_run_rows")
    total = {k: sum(line[k] for line in lines) for k in keys}
    total["evaluations"] = {}
    for line in lines:
        for e, n in line["evaluations"].items():
            total["evaluations"][e] = total["evaluations"].get(e, 0) + n
    total["distinct_runs"] = sum(1 for r in p.runs.values() if isinstance(r.subject, TrainConfig))
    total["with_shared_encodings"] = {}
    for run in p.runs.values():
        for e in run.free & set(run.pending_evals()):
            total["with_shared_encodings"][e] = total["with_shared_encodings"].get(e, 0) + 1
    total["all_at_once_wall_hours"] = longest_first(all_tasks, workers) / 3600
    runs = [{"key": r.key if r.known else None, "notebook": r.notebook, "row": r.label, "seed": r.seed,
             "preset": getattr(r.subject, "preset", None), "method": getattr(r.subject, "method", None),
             "model": getattr(r.subject, "model", None), "stored": r.trained, "stage1_steps": r.stage1,
             "main_steps": r.main, "hours": r.seconds / 3600, "evaluations_to_run": r.pending_evals(),
             "estimated": r.estimated} for r in p.runs.values()]
    return {"profile": p.profile, "seeds": p.seeds, "results_store": p.store_root,
            "step_times": {"device": figures.device, "source": figures.source, "described": figures.describe(),
                           **{k: v for k, v in figures.entry.items() if k != "methods"},
                           "methods": figures.entry.get("methods", {})},
            "workers": workers, "cluster": p.cluster, "notebooks": lines, "total": total,
            "untimed_evaluations": untimed, "runs": runs}


def _hours(h: float) -> str:
    return f"{h:,.2f}" if h < 100 else f"{h:,.0f}"


def _duration(h: float) -> str:
    minutes = round(h * 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def text(b: dict, command: str) -> str:
    """The bill as the console shows it: one line per notebook, the total, then what the figures are and what is
    estimated."""
    gpu = b["profile"] == "paper"
    unit = "GPU-h" if gpu else "h"
    n = b["workers"]
    where = (f"{n} {'GPU' if gpu else 'worker'}{'s' if n > 1 else ''}"
             + (" (SLURM jobs)" if b["cluster"] == "slurm" else ""))
    head = f"{'notebook':<34}{'runs':>6}{'earlier':>8}{'stored':>7}{'to train':>9}{'steps':>13}{unit:>9}" \
           f"{'eval h':>8}  wall h on {where}"
    st = b["step_times"]
    out = [f"{command}: the report's bill before it is spent (nothing trained, evaluated or executed)",
           f"profile {b['profile']}; seeds {b['seeds']} (compare_methods and equal_budget: their own); results store "
           f"{b['results_store']}", f"step times: {st['described']}", "", head, "-" * len(head)]
    for line in b["notebooks"]:
        out.append(f"{line['notebook']:<34}{line['runs']:>6}{line['earlier']:>8}{line['stored']:>7}"
                   f"{line['to_train']:>9}{line['steps']:>13,}{_hours(line['train_hours']):>9}"
                   f"{_hours(line['evaluation_hours']):>8}  {_hours(line['wall_hours'])}")
    t = b["total"]
    out += ["-" * len(head),
            f"{'total':<34}{t['runs']:>6}{t['earlier']:>8}{t['stored']:>7}{t['to_train']:>9}{t['steps']:>13,}"
            f"{_hours(t['train_hours']):>9}{_hours(t['evaluation_hours']):>8}  {_hours(t['wall_hours'])}", ""]
    out.append(f"runs: the training runs a notebook asks for; earlier: of them, those an earlier notebook of the "
               f"report trains (a run is trained once); stored: those the results store holds (they cost nothing).")
    out.append(f"{t['distinct_runs']} distinct training runs, {t['stored']} stored, {t['to_train']} to train: "
               f"{t['steps']:,} steps, {_hours(t['train_hours'])} {unit} ({_duration(t['train_hours'])}) with their "
               f"dev evaluations and checkpoints, on {st['device']}.")
    if t["evaluations"]:
        untimed = b["untimed_evaluations"]
        kinds = ", ".join(f"{n} {e}" for e, n in sorted(t["evaluations"].items()))
        timed = (f"{_hours(t['evaluation_hours'])} h ({_duration(t['evaluation_hours'])})"
                 if t["evaluation_hours"] else "")
        out.append(f"Final evaluations to run: {kinds}" + (f"; {timed}" if timed else "")
                   + (f"; not timed on {st['device']} and not in the hours: "
                      + ", ".join(f"{n} {e}" for e, n in sorted(untimed.items()))
                      + f" (`{measure_hint(b['profile'])}` on the device times them)" if untimed else "") + ".")
    if t["with_shared_encodings"]:
        out.append("Computed with the STS test from the same encodings, at no cost of their own (the store's "
                   "with_shared_encodings): " + ", ".join(f"{n} {e}" for e, n in
                                                           sorted(t["with_shared_encodings"].items())) + ".")
    total = t["train_hours"] + t["evaluation_hours"]
    out.append(f"In all: {_hours(total)} {unit} ({_duration(total)}); the notebooks' own work (kernels, tables, "
               "figures) comes on top.")
    out.append(f"Wall time on {where}: {_hours(t['wall_hours'])} h ({_duration(t['wall_hours'])}), an estimate: "
               "each notebook's pending runs scheduled longest first onto the workers, the notebooks one after "
               "another as the report runs them (it waits for a notebook's runs before the next); all runs sent at "
               f"once: {_hours(t['all_at_once_wall_hours'])} h.")
    estimated = sorted({w for line in b["notebooks"] for w in line["estimated"]})
    notes = list(dict.fromkeys(f"{line['notebook']}: {note}" for line in b["notebooks"] for note in line["notes"]))
    notes += [st[what] for what in ("shape", "overhead_note", "large_note", "dev_eval_note") if st.get(what)]
    if estimated or notes:
        out.append("Estimates and assumptions:")
        out += [f"  - {note}" for note in estimated + notes]
    if t["not_run_rows"]:
        out.append(f"{t['not_run_rows']} row(s) the {b['profile']} profile does not run are left out (the tables show "
                   "them as not run, with the reason).")
    return "\n".join(out)


def measure_hint(profile: str) -> str:
    from .step_times import measure_command

    return measure_command(profile)


def measure_for(p: Plan, data_dir=None, results_dir=None, log=print):
    """`--measure`: time on this machine one run of each method (and large backbone) the plan trains, at its most
    common preset, and each final evaluation it asks for; the figures written for later plans (step_times.measure)."""
    from collections import Counter

    from ..methods.registry import method_class
    from ..results.evaluations import EVALUATIONS
    from ..train.config import TrainConfig
    from ..train.presets import PRESETS
    from .step_times import LARGE_BACKBONES, measure

    by_key: dict = {}
    for run in p.runs.values():
        cfg = run.subject
        if not isinstance(cfg, TrainConfig):
            continue
        large = cfg.preset in PRESETS and PRESETS[cfg.preset][0] in LARGE_BACKBONES
        by_key.setdefault(f"{cfg.method}/large" if large else cfg.method, []).append(cfg)
    representatives = {}
    for key, cfgs in by_key.items():
        plain = [c for c in cfgs if c.semi_strategy == "none"] or cfgs
        preset = Counter(c.preset for c in plain).most_common(1)[0][0]
        cfg = next(c for c in plain if c.preset == preset)
        representatives[key] = (cfg, bool(method_class(cfg.method).two_stages) or cfg.semi_strategy != "none")
    kinds = sorted({e for run in p.runs.values() for e in run.evals if e in EVALUATIONS})
    return measure(p.profile, representatives, kinds, data_dir, results_dir, log)
