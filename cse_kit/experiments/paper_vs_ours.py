"""Paper vs reproduced: compare puts the paper's number beside ours (mean ± std over seeds, n, Δ, and the row's
untrained start) per row and column; unpublished, side_by_side and with_paper lay out figures without published
numbers and single values the same way; show and show_values are what a notebook displays (render.py draws them);
comparison_frame reads a saved comparison back."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..data.published import paper_table
from .rows import RELEASED_SUFFIX, START_COLUMN


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


def comparison_frame(lines: list[dict]) -> pd.DataFrame:
    """A saved comparison back as compare() made it: JSON wrote NaN as null, so a column of a figure the paper gives
    no numbers for (paper, diff) comes back as None throughout; numbers again, NaN where null."""
    frame = pd.DataFrame(lines)
    for column in ("paper", "mean", "std", "diff", "n", "tolerance", "start_value", "from_start"):
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


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
