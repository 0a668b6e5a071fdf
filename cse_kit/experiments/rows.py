"""A table's rows over seeds: a Row is a preset with overrides (trained) or a model evaluated as it is; run_rows
gives one line per row and seed, each record reused from the results store or computed there (by workers where
asked), with the row's untrained start on the profiles that show it; records, best_on_dev; stale_note for the
records other library versions computed."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pandas as pd

from ..environment import stale_versions
from ..progress import duration, progress
from ..results import Pretrained, parallel
from ..train.presets import ProfileUnavailable, build_config
from .profiles import STARTS_SHOWN
from .session import Setup


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


def plan_rows(rows: list[Row], s: Setup) -> list[tuple[Row, list, ProfileUnavailable | None]]:
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
    plan = plan_rows(rows, s)
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
