"""How a paper-vs-reproduced comparison is shown, in the notebooks and in the report: in the paper's own layout
(its rows and columns), each cell the paper's number, ours (mean ± std) and Δ on three lines, every number
formatted by its kind (a learning rate 7e-06, λ 0.005, a batch size 64, a score 84.56), and Δ coloured by a
tolerance that belongs to the metric."""

from __future__ import annotations

import html
import math

import pandas as pd

#: |Δ| within which a cell is green, in the metric's own unit. Spearman ×100 and accuracies: one point (the
#: default); alignment and uniformity live on a 0-4 scale where one point would accept anything.
TOLERANCES = {"Alignment": 0.02, "Uniformity": 0.1}
DEFAULT_TOLERANCE = 1.0
GREEN, RED = "#1a7f37", "#cf222e"


def tolerance_of(line) -> float:
    """A comparison line's tolerance: its own `tolerance` (e.g. 0 for hyper-parameters) or its column's."""
    own = getattr(line, "tolerance", None)
    if own is not None and not (isinstance(own, float) and math.isnan(own)):
        return float(own)
    return TOLERANCES.get(line.column, DEFAULT_TOLERANCE)


def within_tolerance(line) -> bool:
    """|Δ| within the line's tolerance (the rule Δ's colour and the report's "reproduced" both follow)."""
    return abs(line.diff) <= tolerance_of(line) + 1e-12


def fmt_number(x: float, decimals: int | None = None) -> str:
    """Scores with two decimals as the papers print them; whole numbers as integers; small values (learning
    rates, λ, alignment) with three significant digits, so 7e-06 and 0.005 never round to 0.00."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    if decimals is not None:
        return f"{x:.{decimals}f}"
    if x == 0 or (abs(x) >= 1 and x.is_integer()):
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def decimals_like(x: float) -> int | None:
    """Decimals that show a value of this size as fmt_number does (std and Δ follow their mean's precision)."""
    if x is None or math.isnan(x) or abs(x) >= 1 or x == 0:
        return 2
    return max(2, 2 - math.floor(math.log10(abs(x))))


def fmt_ours(mean: float, std: float, n: int) -> str:
    if n == 0 or math.isnan(mean):
        return "not run"
    if n == 1:  # one value, e.g. a setting: as the paper prints its numbers (64, 0.005, 7e-06)
        return f"{fmt_number(mean)} (n=1)"
    if mean != 0 and abs(mean) < 1e-3:  # e.g. a collapsed smoke model's alignment: scientific, not 0.00000580
        return f"{mean:.2e} ± {std:.1e}"
    d = decimals_like(mean)
    return f"{mean:.{d}f} ± {std:.{d}f}"


def fmt_diff(diff: float, mean: float) -> str:
    """Δ with its mean's precision, at most 4 decimals (a tiny mean far from the paper's value)."""
    return "" if math.isnan(diff) else f"{diff:+.{min(4, decimals_like(mean))}f}"


def _cell_html(line) -> str:
    if line.n == 0 or math.isnan(line.mean):
        reason = html.escape(str(line.reason or ""))
        return (f"<span class='paper'>{fmt_number(line.paper)}</span><br>"
                f"<span class='notrun' title='{reason}'>not run</span>")
    if tolerance_of(line) == 0 and line.n == 1:  # a setting (a learning rate, a batch size), not a measurement
        same = line.mean == line.paper
        return (f"<span class='paper'>{fmt_number(line.paper)}</span><br><b>{fmt_number(line.mean)}</b><br>"
                f"<span class='delta' style='color:{GREEN if same else RED}'>"
                f"{'same' if same else fmt_diff(line.diff, line.mean)}</span>")
    # paper, ours and Δ on three short lines: an 8-column table fits a 1400-px window
    cell = f"<span class='paper'>{fmt_number(line.paper)}</span><br><b>{fmt_ours(line.mean, line.std, line.n)}</b>"
    if not math.isnan(line.diff):
        colour = GREEN if within_tolerance(line) else RED
        cell += f"<br><span class='delta' style='color:{colour}'>{fmt_diff(line.diff, line.mean)}</span>"
    return cell


def tolerance_caption(comparison: pd.DataFrame) -> str:
    tolerances = {}
    for line in comparison.itertuples():
        tolerances.setdefault(tolerance_of(line), set()).add(line.column)
    rules = []
    for tol, columns in sorted(tolerances.items()):
        what = ", ".join(sorted(columns)) if tol != DEFAULT_TOLERANCE else "scores (Spearman ×100, accuracy %)"
        rules.append(f"{what}: exact" if tol == 0 else f"{what}: within {fmt_number(tol)}")
    return ("each cell: the paper's number, below it ours (mean ± std over seeds), then Δ = ours − paper; Δ green when "
            + "; ".join(rules))


def paper_layout_html(comparison: pd.DataFrame, caption: str = "") -> str:
    """The comparison as HTML tables in the paper's layout: its rows, its columns, one coloured cell each. Rows with
    different columns (a notebook of several tables, e.g. Tables 12-14) get one table per set of columns."""
    if comparison.empty:
        return "<p class='note'>nothing to compare</p>"
    cells = {(line.row, line.column): _cell_html(line) for line in comparison.itertuples()}
    blocks: dict[tuple, list] = {}
    for row in dict.fromkeys(comparison.row):
        blocks.setdefault(tuple(c for c in dict.fromkeys(comparison.column) if (row, c) in cells), []).append(row)
    caption_html = f"<caption>{html.escape(caption)}<br><small>{html.escape(tolerance_caption(comparison))}" \
                   "</small></caption>"
    tables = []
    for i, (columns, rows) in enumerate(blocks.items()):
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join(f"<tr><th class='rowlabel'>{html.escape(str(r))}</th>"
                       + "".join(f"<td>{cells[(r, c)]}</td>" for c in columns) + "</tr>" for r in rows)
        tables.append(f"<div class='scroll'><table class='paper-layout'>{caption_html if i == 0 else ''}<thead><tr>"
                      f"<th></th>{head}</tr></thead><tbody>{body}</tbody></table></div>")
    return "".join(tables) + not_run_notes(comparison)


def not_run_notes(comparison: pd.DataFrame) -> str:
    """Why rows did not run, visible under the table (not only in a cell's tooltip): one line per reason."""
    not_run = comparison[(comparison["n"] == 0) & comparison["reason"].fillna("").astype(bool)]
    by_reason: dict[str, list] = {}
    for line in not_run.itertuples():
        rows = by_reason.setdefault(str(line.reason), [])
        if line.row not in rows:
            rows.append(line.row)
    return "".join(f"<p class='note notrun-reason'>not run: {html.escape(', '.join(map(str, rows)))}: "
                   f"{html.escape(reason)}</p>" for reason, rows in by_reason.items())


def long_form_html(comparison: pd.DataFrame) -> str:
    """Every (row, column) line with its numbers, for readers who want them all (shown collapsed)."""
    shown = comparison.assign(
        paper=[fmt_number(x) for x in comparison["paper"]],
        ours=[fmt_ours(m, s, n) for m, s, n in zip(comparison["mean"], comparison["std"], comparison["n"])],
        diff=[fmt_diff(d, m) for d, m in zip(comparison["diff"], comparison["mean"])])
    keep = [c for c in ("row", "column", "paper", "ours", "n", "diff", "reason") if c in shown]
    return shown[keep].to_html(index=False, border=0, classes="long-form", escape=True)


class Shown:
    """What a notebook displays: the paper-layout table (Jupyter renders `_repr_html_`)."""

    def __init__(self, comparison: pd.DataFrame, caption: str):
        self.comparison, self.caption = comparison, caption

    def _repr_html_(self) -> str:
        return paper_layout_html(self.comparison, self.caption)
