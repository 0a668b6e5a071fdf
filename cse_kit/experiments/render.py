"""How a paper-vs-reproduced comparison is shown, in the notebooks and in the report: in the paper's own layout
(its rows and columns), each cell the paper's number, ours (mean ± std) and Δ on three lines, every number
formatted by its kind (a learning rate 7e-06, λ 0.005, a batch size 64, a score 84.56), and Δ coloured by a
tolerance that belongs to the metric."""

from __future__ import annotations

import html
import math

import numpy as np
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
    x = float(x) + 0.0  # -0.0 (a rounded tiny negative) prints as 0
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


def column_formatter(values):
    """A formatter for a column of numbers that tells them apart: at least the digits fmt_number shows for their
    size, more when they lie closer together (two significant digits of their spread, max − min), so 0.999985 and
    0.999990 are not both 1.0. Whole numbers stay whole; values under 1e-3 are scientific."""
    finite = [float(v) for v in values if _is_number(v) and math.isfinite(float(v))]
    spread = max(finite) - min(finite) if finite else 0.0
    if not finite or all(v.is_integer() for v in finite) or spread == 0:
        return fmt_number
    size = max(abs(v) for v in finite)
    spread_exponent = math.floor(math.log10(float(f"{spread:.1e}")))  # 1e-5, not 9.99999e-6's -6
    if size < 1e-3:
        digits = min(12, max(3, math.floor(math.log10(size)) - spread_exponent + 2))
        return lambda x: fmt_number(x) if not _is_number(x) or math.isnan(float(x)) else f"{float(x):.{digits - 1}e}"
    decimals = min(12, max(2, 1 - math.floor(math.log10(size)), 1 - spread_exponent))  # 0.68, 0.0050, 84.56
    return lambda x: fmt_number(x, decimals) if _is_number(x) else x


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def values_cells(frame: pd.DataFrame, together: bool = False) -> pd.DataFrame:
    """The cells a values table shows, as text: numbers through column_formatter (each column's digits from its own
    spread, or with `together` from the spread of all), None as "—"; an index of labels (not positions) becomes the
    first column: the key leads. The HTML, LaTeX and Markdown of such a table all show these cells."""
    if any(frame.index.names) or not pd.api.types.is_integer_dtype(frame.index):  # row labels, not positions
        frame = frame.rename_axis([name or "" for name in frame.index.names]).reset_index()
    numeric = [c for c in frame.columns if any(_is_number(v) for v in frame[c])]
    if together:
        shared = column_formatter([v for c in numeric for v in frame[c]])
        formatters = dict.fromkeys(numeric, shared)
    else:
        formatters = {c: column_formatter(frame[c]) for c in numeric}
    shown = frame.astype(object).copy()
    for c, formatter in formatters.items():
        shown[c] = [formatter(v) if _is_number(v) else ("—" if v is None else v) for v in frame[c]]
    return shown


def values_html(frame: pd.DataFrame, caption: str = "", together: bool = False) -> str:
    """A table that is not a paper-vs-ours comparison (paper's cited rows, per-group means, examples) as HTML, its
    cells values_cells'."""
    shown = values_cells(frame, together)
    caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    table = shown.to_html(index=False, border=0, classes="values", escape=True)
    return f"<div class='scroll'>{table.replace('>', '>' + caption_html, 1) if caption_html else table}</div>"


class ShownValues:
    """What a notebook displays for a table that is not a comparison (Jupyter renders `_repr_html_`)."""

    def __init__(self, frame: pd.DataFrame, caption: str = "", together: bool = False):
        self.frame, self.caption, self.together = frame, caption, together

    def _repr_html_(self) -> str:
        return values_html(self.frame, self.caption, self.together)


def fmt_ours(mean: float, std: float, n: int) -> str:
    if n == 0 or math.isnan(mean):
        return "not run"
    tiny = mean != 0 and abs(mean) < 1e-3  # e.g. a collapsed smoke model's alignment: scientific, not 0.00000580
    if n == 1:  # one seed: its value as the paper prints its numbers (84.56, 0.005), tiny ones as the others' means
        return f"{mean:.2e} (n=1)" if tiny else f"{fmt_number(mean)} (n=1)"
    if tiny:
        return f"{mean:.2e} ± {std:.1e}"
    d = decimals_like(mean)
    return f"{mean:.{d}f} ± {std:.{d}f}"


def fmt_diff(diff: float, mean: float) -> str:
    """Δ with its mean's precision, at most 4 decimals (a tiny mean far from the paper's value)."""
    return "" if math.isnan(diff) else f"{diff:+.{min(4, decimals_like(mean))}f}"


def _flag(value) -> bool:
    """A boolean column's value; NaN (a line of a frame concatenated with one that lacks the column) is False."""
    return isinstance(value, (bool, np.bool_)) and bool(value)


def is_setting(line) -> bool:
    """A value that is not measured over seeds (a hyper-parameter, a parameter count: experiments.side_by_side
    marks its lines `setting`), or one value held to an exact tolerance. Shown as the paper prints it: no "(n=1)"."""
    return _flag(getattr(line, "setting", False)) or (tolerance_of(line) == 0 and line.n == 1)


def unit_of(line) -> str:
    """The unit a line's values carry in their cell (e.g. "M" for millions of parameters, "%"); none by default."""
    unit = getattr(line, "unit", "")
    return unit if isinstance(unit, str) else ""


def paper_text(line) -> str:
    shown = fmt_number(line.paper)
    return shown if shown == "—" else shown + unit_of(line)


def ours_text(line) -> str:
    """Our side of a cell: a setting as a plain value, a measurement as mean ± std (n=1 when one seed ran)."""
    if line.n == 0 or math.isnan(line.mean):
        return "not run"
    if is_setting(line):
        return fmt_number(line.mean) + unit_of(line)
    return fmt_ours(line.mean, line.std, line.n) + unit_of(line)


def delta_text(line) -> str:
    """Δ = ours − paper; for a setting held exactly, "same" or "differs"; empty without both numbers."""
    if math.isnan(line.diff):
        return ""
    if is_setting(line) and tolerance_of(line) == 0:
        return "same" if within_tolerance(line) else "differs"
    return fmt_diff(line.diff, line.mean)


def _cell_html(line) -> str:
    if line.n == 0 or math.isnan(line.mean):
        missing = getattr(line, "missing", "")
        reason = html.escape(f"{missing}: {line.reason}" if _text(missing) else str(line.reason or ""))
        return (f"<span class='paper'>{html.escape(paper_text(line))}</span><br>"
                f"<span class='notrun' title='{reason}'>not run</span>")
    # paper, ours and Δ on three short lines: an 8-column table fits a 1400-px window
    cell = f"<span class='paper'>{html.escape(paper_text(line))}</span><br><b>{html.escape(ours_text(line))}</b>"
    delta = delta_text(line)
    if delta:
        colour = GREEN if within_tolerance(line) else RED
        cell += f"<br><span class='delta' style='color:{colour}'>{delta}</span>"
    start = start_text(line)
    if start:
        cell += f"<br><span class='start' title='{html.escape(str(line.start))}'>{html.escape(start)}</span>"
    return cell


def has_start(line) -> bool:
    """Whether a line carries its row's untrained start (experiments.run_rows on a profile that shows starts)."""
    value = getattr(line, "start_value", None)
    return _text(getattr(line, "start", None)) and value is not None and not math.isnan(value)


def start_numbers(line) -> tuple[str, str] | None:
    """("73.69", "+1.16"): the untrained model's value under the row's pooler, and ours − start; None without both."""
    if not has_start(line) or line.n == 0 or math.isnan(line.mean):
        return None
    return fmt_number(line.start_value), fmt_diff(line.from_start, line.mean)


def start_text(line) -> str:
    """"start 73.69: +1.16": start_numbers as a cell's last line."""
    numbers = start_numbers(line)
    return f"start {numbers[0]}: {numbers[1]}" if numbers else ""


def start_caption(comparison: pd.DataFrame) -> str:
    """Which untrained starts the cells' last line compares with, or "" when none does."""
    starts = [line.start for line in comparison.itertuples() if has_start(line)]
    if not starts:
        return ""
    return ("last line: the untrained model evaluated under the row's own pooler (start) and ours − start; starts: "
            + ", ".join(dict.fromkeys(starts)))


def tolerance_rules(comparison: pd.DataFrame) -> list[str]:
    """Each tolerance the comparison's Δs are judged by, with what it applies to: "scores (...): within 1"."""
    tolerances = {}
    for line in comparison.itertuples():
        # the default tolerance is a score's point; a setting or count held to it is named (Table 14's counts)
        score = tolerance_of(line) == DEFAULT_TOLERANCE and not is_setting(line)
        tolerances.setdefault((tolerance_of(line), score), set()).add(line.column)
    rules = []
    for (tol, score), columns in sorted(tolerances.items()):
        what = "scores (Spearman ×100, accuracy %)" if score else ", ".join(sorted(map(str, columns)))
        rules.append(f"{what}: exact" if tol == 0 else f"{what}: within {fmt_number(tol)}")
    return rules


def tolerance_caption(comparison: pd.DataFrame) -> str:
    settings = [is_setting(line) for line in comparison.itertuples()]
    parts = []
    if not all(settings):
        parts.append("each cell: the paper's number, below it ours (mean ± std over seeds), then Δ = ours − paper")
    if any(settings):
        parts.append("values not measured over seeds (hyper-parameters, counts): the paper's, below it ours, then "
                     "'same' or 'differs' when they must match exactly, else Δ")
    return "; ".join(parts) + "; green when " + "; ".join(tolerance_rules(comparison))


def layout_blocks(comparison: pd.DataFrame) -> dict[tuple, list]:
    """The paper's layout: its columns -> the rows that have exactly them, in the comparison's order. Rows with
    different columns (a notebook of several tables, e.g. Tables 12-14) make one block, a table, per set."""
    present = set(zip(comparison.row, comparison.column))
    blocks: dict[tuple, list] = {}
    for row in dict.fromkeys(comparison.row):
        blocks.setdefault(tuple(c for c in dict.fromkeys(comparison.column) if (row, c) in present), []).append(row)
    return blocks


def paper_layout_html(comparison: pd.DataFrame, caption: str = "") -> str:
    """The comparison as HTML tables in the paper's layout: its rows, its columns, one coloured cell each. Rows with
    different columns (a notebook of several tables, e.g. Tables 12-14) get one table per set of columns."""
    if comparison.empty:
        return "<p class='note'>nothing to compare</p>"
    cells = {(line.row, line.column): _cell_html(line) for line in comparison.itertuples()}
    blocks = layout_blocks(comparison)
    starts = start_caption(comparison)
    caption_html = f"<caption>{html.escape(caption)}<br><small>{html.escape(tolerance_caption(comparison))}" \
                   + (f"<br>{html.escape(starts)}" if starts else "") + "</small></caption>"
    tables = []
    for i, (columns, rows) in enumerate(blocks.items()):
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join(f"<tr><th class='rowlabel'>{html.escape(str(r))}</th>"
                       + "".join(f"<td>{cells[(r, c)]}</td>" for c in columns) + "</tr>" for r in rows)
        tables.append(f"<div class='scroll'><table class='paper-layout'>{caption_html if i == 0 else ''}<thead><tr>"
                      f"<th></th>{head}</tr></thead><tbody>{body}</tbody></table></div>")
    return "".join(tables) + not_run_notes(comparison)


def not_run_notes(comparison: pd.DataFrame) -> str:
    """Why rows did not run, visible under the table (not only in a cell's tooltip): one line per cause."""
    return "".join(f"<p class='note notrun-reason'>not run: {html.escape(reason)}</p>"
                   for reason in not_run_reasons(comparison.to_dict("records")))


def _text(value) -> bool:
    """A non-empty string (a line read back from JSON through pandas has NaN where it had no such field)."""
    return isinstance(value, str) and bool(value)


def not_run_reasons(lines: list[dict]) -> list[str]:
    """One sentence per cause of the comparison lines that did not run: how many rows, what they miss (each named
    once), why: "8 rows (princeton-nlp/unsup-simcse-bert-base-uncased, ...): released checkpoints need the Hub: ..."."""
    rows: dict[str, dict] = {}
    missing: dict[str, dict] = {}
    for line in lines:
        if line.get("n") == 0 and _text(line.get("reason")):
            rows.setdefault(line["reason"], {})[line["row"]] = None
            missing.setdefault(line["reason"], {}).update({line["missing"]: None} if _text(line.get("missing")) else {})
    return [f"{len(labels)} row{'s' if len(labels) > 1 else ''}"
            + (f" ({', '.join(missing[reason])})" if missing[reason] else "") + f": {reason}"
            for reason, labels in rows.items()]


def long_form_html(comparison: pd.DataFrame) -> str:
    """Every (row, column) line with its numbers, for readers who want them all (shown collapsed)."""
    lines = list(comparison.itertuples())
    shown = comparison.assign(paper=[paper_text(x) for x in lines], ours=[ours_text(x) for x in lines],
                              n=["" if is_setting(x) else x.n for x in lines], diff=[delta_text(x) for x in lines])
    if any(has_start(x) for x in lines):
        shown = shown.assign(start=[fmt_number(x.start_value) if has_start(x) else "" for x in lines],
                             from_start=[(start_numbers(x) or ("", ""))[1] for x in lines])
    keep = [c for c in ("row", "column", "paper", "ours", "n", "diff", "start", "from_start", "reason") if c in shown]
    return shown[keep].to_html(index=False, border=0, classes="long-form", escape=True)


class Shown:
    """What a notebook displays: the paper-layout table (Jupyter renders `_repr_html_`)."""

    def __init__(self, comparison: pd.DataFrame, caption: str):
        self.comparison, self.caption = comparison, caption

    def _repr_html_(self) -> str:
        return paper_layout_html(self.comparison, self.caption)
