"""Every method tuned with the same budget: the question a reviewer asks of the four papers, each of which tuned its
own method and copied its baselines' numbers. One Optuna study per method (cse_kit.tune: seeded TPE,
every trial a run of the results store, the objective the run's own checkpoint-selection dev score, no test set
read) searches lr and temperature around the method's recipe and its own main knob, with the same number of trials
for every method. Then, as the head-to-head does (comparison.head_to_head, its statistics reused as they are), the
chosen configuration and the paper recipe are both tested over the seeds: mean ± std, paired tests against the paper
recipe and between methods, the papers' claimed orderings at equal budget, and what the search cost.

The chosen configuration's runs are tune.chosen_on_test's: study.config(best parameters, seed) for every seed
(its first seed's run is the trial itself, trained once)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..experiments import Row, check
from ..experiments import records as fetch_records
from ..experiments.render import fmt_ours
from ..tune import Study, best, parse_space
from ..tune import run as run_study
from ..methods.registry import method_class
from ..progress import duration, progress
from ..train.presets import build_config, per_profile
from . import comparison as cmp

NOTEBOOK = "equal_budget"
TITLE = "Every method tuned with the same budget"
PAPER_RECIPE, RECIPE = "paper recipe", "equal budget"
#: trials per method and profile: the same for every method (the budget). Below ten, Optuna's TPE draws every trial
#: at random (its n_startup_trials); smoke's three keep the report quick, mini's and cpu's eight add about 32 runs
TRIALS = per_profile({"paper": 30, "mini": 8, "cpu": 8, "smoke": 3})
#: the methods searched unless told: SimCSE and the three papers' unsupervised methods that train on Wiki1M alone
DEFAULT_METHODS = ["SimCSE", "DiffCSE", "SCD", "ESimCSE"]
#: the temperature a method's loss divides by, where it is not the run's `temp`: SCD's self-contrast L_S reads its own
TEMPERATURE = {"SCD": "scd.temp"}
#: each kit method's own main knob, over the range its paper sweeps (DiffCSE Table 8's λ, ESimCSE Table 9's
#: duplication rates, DiffAug Figure 4's prefix lengths, its grid) or, where none is printed, a decade each side of
#: the recipe (SCD's β = 0.005); SimCSE's is its temperature, PromptBERT's and ConSERT's recipes fix theirs
KNOBS = {"DiffCSE": "diffcse.lambda_weight=log(1e-4,1e-1)", "ESimCSE": "esimcse.dup_rate=(0.08,0.36)",
         "SCD": "scd.decorrelation_weight=log(5e-4,5e-2)", "DiffAug": "diffaug.prefix_len=[1,2,4,8,16,32]"}
#: how far the searched lr and temperature reach each side of the recipe's (×/ LR_FACTOR, ×/ TEMPERATURE_FACTOR)
LR_FACTOR, TEMPERATURE_FACTOR = 3, 2
#: a method of one's own: its first float option with a positive default, searched ×/ OWN_KNOB_FACTOR around it
OWN_KNOB_FACTOR = 4


# --- what each study searches ---------------------------------------------------------------------------------------
def recipe_config(method: str, profile: str):
    """The paper recipe's run of a method on a profile (its preset with the profile's sizes; a method of one's own on
    comparison.OWN_BASE_PRESET)."""
    preset, settings = cmp.method_row(method)
    return build_config(preset, profile, settings)


def recipe_value(cfg, name: str):
    """A setting's value in a run: `<method>.<option>` from its method's options, any other from the run itself."""
    _, dot, option = name.rpartition(".")
    return cfg.method_options[option] if dot else getattr(cfg, name)


def own_knob(method: str) -> str | None:
    """A method of one's own's main knob: its first float option with a positive default, searched around it."""
    options = method_class(method).Options
    for option in dataclasses.fields(options) if options else ():
        if option.type in (float, "float") and isinstance(option.default, float) and option.default > 0:
            low, high = option.default / OWN_KNOB_FACTOR, option.default * OWN_KNOB_FACTOR
            return f"{method}.{option.name}=log({low:.3g},{high:.3g})"
    return None


def default_space(method: str, profile: str) -> str:
    """lr (log, ×/3) and the temperature (×/2) around the method's recipe on this profile, and its own main knob."""
    cfg = recipe_config(method, profile)
    temperature = TEMPERATURE.get(method, "temp")
    temp = recipe_value(cfg, temperature)
    knob = KNOBS.get(method) if method in cmp.METHODS else own_knob(method)
    return "; ".join([f"lr=log({cfg.lr / LR_FACTOR:.3g},{cfg.lr * LR_FACTOR:.3g})",
                      f"{temperature}=({temp / TEMPERATURE_FACTOR:.3g},{temp * TEMPERATURE_FACTOR:.3g})",
                      *([knob] if knob else [])])


def study_of(method: str, profile: str, space: str, trials: int, seed: int, store) -> Study:
    """The study of one method: its paper recipe's preset and settings, `space` searched with `trials` trials of
    `seed` (the sampler's and every trial's training seed), kept beside the results store."""
    preset, settings = cmp.method_row(method)
    return Study(preset, profile, parse_space(space), trials, [f"{k}={v}" for k, v in settings.items()], seed,
                 str(store.root), str(store.data_dir))


def studies(s, methods: list, trials: int, spaces: dict) -> dict[str, Study]:
    """method -> its study on s's profile, seeded by s's first seed; `spaces` replaces a method's default space."""
    unknown = sorted(set(spaces) - set(methods))
    check(not unknown, f"space names methods that are not searched: {unknown} (methods: {methods})")
    check(trials >= 1, f"trials must be at least 1, got {trials}")
    return {m: study_of(m, s.profile, spaces.get(m) or default_space(m, s.profile), trials, s.seeds[0], s.store)
            for m in methods}


def search(found: dict[str, Study], workers: int = 1) -> dict[str, list[dict]]:
    """Every study run to its total (trials the store has are read, not trained); method -> its trials."""
    out = {}
    for method, study in found.items():
        progress(f"{method}: study {study.name}, {study.trials} trials")
        with warnings.catch_warnings():  # Optuna's notes on its experimental heartbeat: the kit's choice, not news
            warnings.filterwarnings("ignore", module="optuna")
            warnings.filterwarnings("ignore", message=".*is experimental")
            out[method] = run_study(study, workers)
        done = [t for t in out[method] if t["state"] == "complete"]
        spent = sum(t["train_seconds"] or 0 for t in done)
        progress(f"{method}: {len(done)} trials complete, {duration(spent)} of training")
    return out


# --- the rows tested over seeds -------------------------------------------------------------------------------------
@dataclass
class StudyRow(Row):
    """A study's chosen configuration as a table row: its run at each seed is study.config(params, seed), the run
    tune.chosen_on_test tests (its first seed's is the winning trial itself)."""

    study: Study | None = None
    params: dict = field(default_factory=dict)

    def subject(self, profile: str, seed: int):
        return self.study.config(self.params, seed)


def rows(found: dict[str, Study], winners: dict[str, dict], profile: str) -> list[Row]:
    """Each method's paper recipe (comparison.rows: the head-to-head's runs, shared through the store), then its
    chosen configuration (winners: method -> its study's chosen trial)."""
    paper = cmp.rows(profile, list(found), [PAPER_RECIPE])
    chosen = [StudyRow(cmp.label(m, RECIPE), study.preset, study=study, params=winners[m]["params"])
              for m, study in found.items()]
    return paper + chosen


# --- tables ---------------------------------------------------------------------------------------------------------
def chosen_settings(found: dict[str, Study], winners: dict[str, dict], profile: str) -> pd.DataFrame:
    """Per method and searched setting: the paper recipe's value (on this profile), the chosen one, the range."""
    lines = []
    for method, study in found.items():
        cfg, chosen = recipe_config(method, profile), winners[method]["params"]
        for dim in study.space:
            searched = (f"{list(dim.choices)}" if dim.kind == "categorical" else
                        f"{'log ' if dim.log else ''}[{dim.low:g}, {dim.high:g}]")
            lines.append({"method": method, "setting": dim.name, PAPER_RECIPE: _text(recipe_value(cfg, dim.name)),
                          RECIPE: _text(chosen[dim.name]), "searched": searched})
    return pd.DataFrame(lines)


def _text(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def best_so_far(trials: list[dict]) -> list[float]:
    """The best dev score after each trial, in trial order (a failed or pruned trial keeps the best before it)."""
    out, top = [], -math.inf
    for trial in sorted(trials, key=lambda t: t["number"]):
        if trial["state"] == "complete" and trial["value"] is not None:
            top = max(top, trial["value"])
        out.append(top if math.isfinite(top) else math.nan)
    return out


def against_paper(long: pd.DataFrame, found_records: dict, gold: dict, samples: int, level: float) -> pd.DataFrame:
    """Per method: average STS test of the paper recipe and of the chosen configuration (mean ± std over the seeds),
    their difference starred where the paired t-test over seeds gives p < level, its p, and the paired bootstrap
    over the STS test pairs (95% interval, p): the head-to-head's tests (comparison.paired_seed_test,
    paired_bootstrap)."""
    paper, tuned = cmp.by_seed(long, PAPER_RECIPE), cmp.by_seed(long, RECIPE)
    paper_sims, tuned_sims = cmp.similarities(found_records, PAPER_RECIPE), cmp.similarities(found_records, RECIPE)
    lines = []
    for method in tuned:
        diff, p = cmp.paired_seed_test(tuned[method], paper.get(method, {}))
        _, low, high, boot_p = (cmp.paired_bootstrap(tuned_sims[method], paper_sims[method], gold, samples)
                                if method in paper_sims else (math.nan,) * 4)
        lines.append({"method": method, PAPER_RECIPE: _mean_std(paper.get(method, {})),
                      RECIPE: _mean_std(tuned[method]),
                      "Δ": "n/a" if math.isnan(diff) else f"{diff:+.2f}{'*' if p < level else ''}",
                      "paired t-test p": p, "bootstrap 95% interval": f"[{low:.2f}, {high:.2f}]",
                      "bootstrap p": boot_p})
    return pd.DataFrame(lines)


def _mean_std(by_seed: dict[int, float]) -> str:
    values = np.array(list(by_seed.values()), float)
    return fmt_ours(values.mean() if len(values) else math.nan, values.std(ddof=1) if len(values) > 1 else math.nan,
                    len(values))


def search_cost(found: dict[str, Study], trials: dict[str, list[dict]], winners: dict[str, dict],
                found_records: dict) -> pd.DataFrame:
    """Per method: the dev score it selects on, the trials (complete, failed, pruned) and their training seconds,
    the best dev score, and the training seconds of the test runs (both recipes over the seeds; the winning trial's
    run, shared, counted once, with the study)."""
    trial_keys = {t["key"] for ts in trials.values() for t in ts}
    lines = []
    for method, study in found.items():
        states = [t["state"] for t in trials[method]]
        seconds = [t["train_seconds"] for t in trials[method] if t["state"] == "complete" and t["train_seconds"]]
        tests = [r for recipe in (PAPER_RECIPE, RECIPE) for r in found_records.get(cmp.label(method, recipe), [])
                 if r["key"] not in trial_keys]
        lines.append({"method": method, "dev metric": study.config({}).metric, "trials": len(states),
                      "complete": states.count("complete"), "failed": states.count("fail"),
                      "pruned": states.count("pruned"), "best dev": winners[method]["value"],
                      "study training s": sum(seconds),
                      "s per trial (median)": float(np.median(seconds)) if seconds else math.nan,
                      "test runs": len(tests), "test runs training s": sum(_train_seconds(r) for r in tests)})
    return pd.DataFrame(lines)


def _train_seconds(record: dict) -> float:
    return record.get("timings", {}).get("train_train_s") or 0.0


# --- the notebook's calls -------------------------------------------------------------------------------------------
@dataclass
class EqualBudget:
    """Everything the notebook shows: the studies and their trials, the chosen settings, the head-to-head of both
    recipes (scores, matrices, claims in words, cost per run), the tests against the paper recipe, the search's
    cost."""

    studies: dict
    trials: dict
    settings: pd.DataFrame
    h: cmp.HeadToHead
    against_paper: pd.DataFrame
    cost: pd.DataFrame


def equal_budget(s, methods: list, trials: int, spaces: dict, bootstrap_samples: int = 1000,
                 level: float = 0.05) -> EqualBudget:
    """One study per method (no test set read), then both recipes tested over s's seeds and compared."""
    check(len(s.seeds) >= 2, f"the paired tests need two seeds or more, got {s.seeds}")
    found = studies(s, methods, trials, spaces)
    workers = s.workers if s.cluster == "local" else 1  # a study's workers are local processes (cse-kit tune)
    trial_lists = search(found, workers)
    winners = {m: best(study, trial_lists[m]) for m, study in found.items()}  # read once, from the trials searched
    table_rows = rows(found, winners, s.profile)
    transfer = cmp.transfer_evaluation(s.profile)
    h = cmp.head_to_head(table_rows, s, [PAPER_RECIPE, RECIPE], transfer, bootstrap_samples=bootstrap_samples,
                         level=level)
    found_records = fetch_records(table_rows, s, cmp.evaluations(transfer))
    gold = cmp.gold(s.store.data_dir)
    return EqualBudget(found, trial_lists, chosen_settings(found, winners, s.profile), h,
                       against_paper(h.long, found_records, gold, bootstrap_samples, level),
                       search_cost(found, trial_lists, winners, found_records))


def show(e: EqualBudget, level: float) -> None:
    """Display the tables in a notebook (the claims in words, e.h.words, are the caller's to print)."""
    from IPython.display import display

    from .. import experiments as ex

    display(ex.show_values(e.settings, "Each method's chosen configuration beside its paper recipe (on this "
                                       "profile), and the range searched"))
    display(ex.show_values(e.against_paper, f"Average STS test, mean ± std over the seeds: the chosen configuration "
                                            f"against the paper recipe; * = paired t-test over seeds p < {level}"))
    display(ex.show_values(e.h.scores, "Average STS test per method and recipe: mean ± std, 95% interval over the "
                                       "seeds, the paper's own number beside its recipe"))
    for name, matrix in e.h.tests[RECIPE].items():
        display(ex.show_values(matrix, f"{RECIPE}: row − column average STS; * = beyond chance at {level} ({name})"))
    display(ex.show_values(e.cost, "The search's cost: trials and their training seconds, the best dev score, and "
                                   "the test runs after it"))
    display(ex.show_values(e.h.costs, "Cost per run on this machine: median s/step, sentences/s, peak memory, the "
                                      "full run projected over Wiki1M's 1M sentences, and the ratios to SimCSE"))


def figures(e: EqualBudget) -> list:
    """The best-so-far curve of every study, and every seed's average STS test per method and recipe."""
    from ..experiments import plots

    curves = {f"{m} ({study.config({}).metric})": best_so_far(e.trials[m]) for m, study in e.studies.items()}
    return [plots.best_so_far(curves, "dev score (each method's selection metric)",
                              "Best dev score so far against trials, per method"),
            plots.seed_strip(e.h.long, "Avg. STS", "Every seed's average STS test per method and recipe")]


def notes(e: EqualBudget) -> list[str]:
    """The page's notes: each study's space and total, the claims in words at both recipes."""
    spaces = [f"{m}: {len(e.trials[m])} trials of {'; '.join(_dimension_text(d) for d in study.space)} "
              f"(study {study.name})" for m, study in e.studies.items()]
    return [*spaces, "the studies read no test set: each trial's objective is its run's checkpoint-selection dev "
                     "score; the chosen configuration and the paper recipe are then tested over the seeds",
            *e.h.words]


def _dimension_text(dim) -> str:
    if dim.kind == "categorical":
        return f"{dim.name} in {list(dim.choices)}"
    return f"{dim.name} {'log-' if dim.log else ''}{dim.kind} [{dim.low:g}, {dim.high:g}]"


def tables(e: EqualBudget) -> dict:
    """The tables save_table keeps for the report and for `cse-kit report --latex`."""
    return {"chosen settings": e.settings.to_dict("records"),
            "equal budget vs paper recipe": e.against_paper.to_dict("records"),
            "scores": e.h.scores.to_dict("records"),
            **{f"{RECIPE}: {name}": matrix.reset_index().to_dict("records")
               for name, matrix in e.h.tests[RECIPE].items()},
            "search cost": e.cost.to_dict("records"), "cost per run": e.h.costs.to_dict("records")}
