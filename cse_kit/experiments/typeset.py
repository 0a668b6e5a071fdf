r"""The tables a paper needs: every table a notebook shows or saves for the report (and so every table the report
shows) as LaTeX and as Markdown, cell for cell what render.py shows in HTML: the same numbers formatted by the same
functions (paper_text, ours_text, delta_text, start_numbers, values_cells), the same marks.

The choices, the same in every table:
- LaTeX: booktabs (\toprule, \midrule, \bottomrule; \addlinespace between a comparison's rows) in a `table` float
  with its caption, the label `tab:<file name>` and the footnote lines under the tabular; it needs
  `\usepackage{booktabs}` and nothing else. Markdown: a GitHub pipe table, its caption above, its footnotes below.
- A comparison keeps the paper's rows and columns; each row takes up to four lines, the lines of the HTML's cell:
  `paper` (the paper's number), `ours` (mean ± std over the seeds; one seed's value followed by "(n=1)"), `Δ`
  (ours − paper; "same" or "differs" for a setting held exactly) and `start` (the untrained model's value, then
  ours − start in brackets), each where the table has it.
- Every number is set in math mode: mean ± std as `$84.30 \pm 0.40$`, a signed Δ as `$-1.23$` (a real minus), a number
  in scientific notation as `$5.80\mathrm{e}{-06}$` (the digits the HTML prints, never rounded again).
- Marks: † on a Δ outside its metric's tolerance (the HTML colours it red; a setting's "differs" says so in words)
  and * on a difference beyond chance in a significance matrix (the HTML's *); a footnote line says what each means.
  In LaTeX a mark is a superscript (`\textsuperscript{\dag}`)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..io import write_text_atomic
from .paper_vs_ours import comparison_frame
from .render import (Shown, ShownValues, delta_text, is_setting, layout_blocks, not_run_reasons, ours_text,
                     paper_text, start_caption, start_numbers, tolerance_rules, values_cells, within_tolerance)

DAGGER, STAR = "†", "*"
LATEX_MARKS = {DAGGER: r"\dag", STAR: "*"}

#: a number as render.py prints it (84.56, -1.47, +0.0447, 7e-06, 5.80e-06), and one with its std (84.30 ± 0.40)
NUMBER = r"[+-]?\d+(?:\.\d+)?(?:e[+-]\d+)?"
MEASURE = re.compile(rf"(?<![\w=.]){NUMBER}(?: ± {NUMBER})?(?![\d.])")
STARRED = re.compile(rf"(?P<number>{NUMBER})(?P<star>\*?)")  # a significance matrix's cell: +1.23*

LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
#: the characters outside ASCII that the papers' values, the notebooks and the kit's captions use, as LaTeX commands
#: (math ones wrapped in \ensuremath, so they read the same in text and in math)
LATEX_SYMBOLS = {"±": r"\pm", "·": r"\cdot", "×": r"\times", "÷": r"\div", "Δ": r"\Delta", "α": r"\alpha",
                 "β": r"\beta", "δ": r"\delta", "θ": r"\theta", "κ": r"\kappa", "λ": r"\lambda", "τ": r"\tau",
                 "′": r"\prime", "→": r"\rightarrow", "−": "-", "∼": r"\sim", "≈": r"\approx", "≤": r"\leq",
                 "≥": r"\geq", "⌊": r"\lfloor", "⌋": r"\rfloor", "△": r"\triangle", "◇": r"\diamond",
                 "♠": r"\spadesuit", "♡": r"\heartsuit", "♢": r"\diamondsuit", "♣": r"\clubsuit", "♯": r"\sharp",
                 "⟨": r"\langle", "⟩": r"\rangle"}
LATEX_TEXT_SYMBOLS = {"§": r"\S{}", "†": r"\dag{}", "‡": r"\ddag{}", "—": "---", "–": "--", "‘": "`", "’": "'",
                      "“": "``", "”": "''", "…": r"\ldots{}"}
MARKDOWN_SPECIALS = {"\\": "\\\\", "|": "\\|", "*": "\\*", "_": "\\_", "`": "\\`", "<": "&lt;"}


@dataclass
class Cell:
    """One cell as the HTML shows it (`text`, its mark apart); `numeric`: its numbers are set in math mode."""

    text: str
    numeric: bool = False
    mark: str = ""


@dataclass
class TextTable:
    """A table for LaTeX and Markdown: its file name (no suffix), caption, header, rows of cells, each column's
    alignment (l, c or r), the rows that open a group of lines, and footnotes as (mark, text)."""

    name: str
    caption: str
    header: list[str]
    rows: list[list[Cell]]
    align: str
    groups: set[int] = field(default_factory=set)
    footnotes: list[tuple[str, str]] = field(default_factory=list)


# --- what a table holds ----------------------------------------------------------------------------------------------
LINE_KINDS = ("paper", "ours", "Δ", "start")


def _line_cells(line) -> dict[str, Cell]:
    """A comparison line's cell on each line of its row: the HTML cell's lines, from the same functions."""
    start = start_numbers(line)
    delta = delta_text(line)
    # a numeric Δ outside its tolerance is red in the HTML; a setting's same/differs says its verdict in words
    outside = delta not in ("", "same", "differs") and not within_tolerance(line)
    return {"paper": Cell(paper_text(line), True), "ours": Cell(ours_text(line), True),
            "Δ": Cell(delta, True, DAGGER if outside else ""),
            "start": Cell(f"{start[0]} ({start[1]})" if start else "", True)}


def _kinds_shown(cells: dict) -> list[str]:
    """The lines a block shows: ours always, the others where any of its cells has something ("—": no paper value)."""
    return [kind for kind in LINE_KINDS
            if kind == "ours" or any(c[kind].text not in ("", "—") for c in cells.values())]


def comparison_tables(comparison: pd.DataFrame, caption: str, name: str) -> list[TextTable]:
    """A comparison in the paper's layout: one table per block of columns (render.layout_blocks), named `name`, or
    `name-1`, `name-2`, ... where there are several."""
    blocks = layout_blocks(comparison)
    return [_block_table(comparison, columns, rows, caption, name if len(blocks) == 1 else f"{name}-{i}")
            for i, (columns, rows) in enumerate(blocks.items(), 1)]


def _block_table(comparison: pd.DataFrame, columns: tuple, rows: list, caption: str, name: str) -> TextTable:
    block = comparison[comparison.row.isin(rows)]
    cells = {(line.row, line.column): _line_cells(line) for line in block.itertuples()}
    kinds = _kinds_shown(cells)
    labels = ["", ""] if len(kinds) > 1 else [""]
    body, groups = [], set()
    for row in rows:
        groups.add(len(body))
        for i, kind in enumerate(kinds):
            label = [Cell(str(row) if i == 0 else "")] + ([Cell(kind)] if len(kinds) > 1 else [])
            body.append(label + [cells[(row, c)][kind] for c in columns])
    marked = any(cell.mark for line in body for cell in line)
    return TextTable(name, caption, labels + [str(c) for c in columns], body, "l" * len(labels) + "c" * len(columns),
                     groups - {0} if len(kinds) > 1 else set(), _comparison_footnotes(block, kinds, marked))


def _comparison_footnotes(block: pd.DataFrame, kinds: list[str], marked: bool) -> list[tuple[str, str]]:
    """What the lines mean, the tolerances (with the mark where a cell has it), the untrained starts, and why rows
    did not run."""
    settings = all(is_setting(line) for line in block.itertuples())
    said = {"paper": "paper: the paper's number", "Δ": "Δ = ours − paper", "start": start_caption(block),
            "ours": "ours: the value (a setting or a count, not measured over seeds)" if settings
            else "ours: mean ± std over the seeds ((n=1): one seed's value)"}
    notes = [("", "; ".join(said[kind] for kind in kinds))]
    if "Δ" in kinds:
        rules = "; ".join(tolerance_rules(block))
        notes.append((DAGGER, f"Δ outside its tolerance ({rules})") if marked else ("", f"tolerances: {rules}"))
    return notes + [("", f"not run: {reason}") for reason in not_run_reasons(block.to_dict("records"))]


def values_table(frame: pd.DataFrame, caption: str, name: str, together: bool = False,
                 significance_level: float | None = None) -> TextTable:
    """A table that is not a comparison, its cells render.values_cells' (the HTML's); a significance matrix's
    starred differences carry the mark *."""
    shown = values_cells(frame, together)
    rows = [[_value_cell(v) for v in record] for record in shown.itertuples(index=False)]
    align = "".join(_align([row[i] for row in rows]) for i in range(len(shown.columns)))
    footnotes = [(STAR, _significance_words(significance_level))] if any(c.mark for r in rows for c in r) else []
    return TextTable(name, caption, [str(c) for c in shown.columns], rows, align, set(), footnotes)


def _align(column: list[Cell]) -> str:
    """r for a column of numbers (its blank and "—" cells aside), l for any other."""
    filled = [cell for cell in column if cell.text not in ("", "—")]
    return "r" if filled and all(cell.numeric for cell in filled) else "l"


def _value_cell(value) -> Cell:
    """A values table's cell: a number (starred or not) or a mean ± std (a column a notebook formatted so, as
    equal_budget's) is set as math; any other text as text."""
    text = "" if value is None else str(value)
    starred = STARRED.fullmatch(text)
    if starred:
        return Cell(starred["number"], True, STAR if starred["star"] else "")
    return Cell(text, bool(MEASURE.fullmatch(text)))


def _significance_words(level: float | None) -> str:
    where = f"p < {level:g}" if level is not None else "p below the notebook's significance level (`level`)"
    return f"the row's difference to the column is beyond chance: {where} by the test the caption names"


# --- a saved table's tables ------------------------------------------------------------------------------------------
def extra_frames(saved: dict) -> list[tuple[str, pd.DataFrame]]:
    """A saved table's extra tables (caption, frame), in the order and with the columns the notebook made them
    (tables.extra_layout: the display message that carried them sorted their keys); the report's page reads them so."""
    tables = saved.get("extra", {}).get("tables", {})
    layout = saved.get("extra_layout", {})
    out = []
    for caption in layout.get("tables") or tables:
        frame = pd.DataFrame(tables[caption])
        out.append((caption, frame[layout.get("columns", {}).get(caption) or list(frame)]))
    return out


def tables_of(saved: dict) -> list[TextTable]:
    """Every table the report shows of one notebook (experiments.save_table's dict), in the page's order: the
    comparison, the extra tables, the examples; each with the profile, the seeds and the notebook's notes as footnotes,
    as the page gives them beside the tables."""
    name, title = saved["name"], saved["title"]
    out = comparison_tables(comparison_frame(saved["comparison"]), title, name) if saved.get("comparison") else []
    level = saved.get("extra", {}).get("significance_level")
    out += [values_table(frame, f"{title}: {caption}", f"{name}-{slug(caption)}", significance_level=level)
            for caption, frame in extra_frames(saved)]
    if saved.get("extra", {}).get("examples"):
        out.append(values_table(pd.DataFrame(saved["extra"]["examples"]), f"{title}: examples", f"{name}-examples"))
    context = [("", f"profile {saved.get('profile')}: {saved.get('profile_note', '')}; seeds {saved.get('seeds')}")]
    context += [("", note) for note in saved.get("notes", [])]
    for table in out:
        table.footnotes += context
    return _named_apart(out)


def text_tables(shown, name: str | None = None) -> list[TextTable]:
    """The tables of a saved table (save_table's dict, or the report's), or of what ex.show / ex.show_values
    returned (named `name`, else after its caption)."""
    if isinstance(shown, dict):
        return tables_of(shown)
    if isinstance(shown, Shown):
        return comparison_tables(shown.comparison, shown.caption, name or slug(shown.caption))
    if isinstance(shown, ShownValues):
        return [values_table(shown.frame, shown.caption, name or slug(shown.caption), shown.together)]
    raise TypeError(f"cannot typeset a {type(shown).__name__}: give a saved table or what ex.show or "
                    "ex.show_values returned")


def slug(text: str) -> str:
    """A file name's part from a caption: ASCII letters and digits, Greek letters by name (α: alpha), dashes."""
    words = [unicodedata.name(ch, "").split()[-1].lower() if "GREEK" in unicodedata.name(ch, "") else ch
             for ch in unicodedata.normalize("NFKD", text)]
    return re.sub(r"[^a-z0-9]+", "-", "".join(words).lower()).strip("-") or "table"


def _named_apart(tables: list[TextTable]) -> list[TextTable]:
    """Two tables whose names coincide (two captions of one slug) get -2, -3, ...: no file overwrites another."""
    seen: dict[str, int] = {}
    for table in tables:
        seen[table.name] = seen.get(table.name, 0) + 1
        table.name += f"-{seen[table.name]}" if seen[table.name] > 1 else ""
    return tables


# --- LaTeX and Markdown ----------------------------------------------------------------------------------------------
def latex_text(text: str) -> str:
    """Text with LaTeX's special characters escaped and the kit's symbols as commands."""
    return "".join(LATEX_SPECIALS.get(ch) or LATEX_TEXT_SYMBOLS.get(ch)
                   or (rf"\ensuremath{{{LATEX_SYMBOLS[ch]}}}" if ch in LATEX_SYMBOLS else ch) for ch in text)


def _latex_math(measure: str) -> str:
    """`84.30 ± 0.40` as `$84.30 \\pm 0.40$`; the exponent of 5.80e-06 upright, its sign a minus."""
    return "$" + re.sub(r"e([+-]\d+)", r"\\mathrm{e}{\1}", measure).replace(" ± ", r" \pm ") + "$"


def latex_cell(cell: Cell) -> str:
    if cell.numeric:
        pieces = MEASURE.split(cell.text)
        numbers = [_latex_math(m) for m in MEASURE.findall(cell.text)]
        text = "".join(latex_text(p) + (numbers[i] if i < len(numbers) else "") for i, p in enumerate(pieces))
    else:
        text = latex_text(cell.text)
    return text + (rf"\textsuperscript{{{LATEX_MARKS[cell.mark]}}}" if cell.mark else "")


def _latex_footnote(mark: str, text: str) -> str:
    return (rf"\textsuperscript{{{LATEX_MARKS[mark]}}}~" if mark else "") + latex_text(text) + r"\par"


def _latex_row(cells) -> str:
    row = " & ".join(cells)
    # a row opening with [ or * would be read as the optional argument or the star of the \\ that ends the row above
    return ("{}" if row.startswith(("[", "*")) else "") + row + r" \\"


def as_latex(table: TextTable) -> str:
    """The table as a booktabs `table` float: caption, label, tabular, footnote lines."""
    body = []
    for i, cells in enumerate(table.rows):
        body += [r"\addlinespace"] if i in table.groups else []
        body.append(_latex_row(latex_cell(c) for c in cells))
    notes = [r"\smallskip", r"{\footnotesize\raggedright"] + [_latex_footnote(*n) for n in table.footnotes] + ["}"]
    return "\n".join([rf"% {table.name}: written by cse-kit (needs \usepackage{{booktabs}})", r"\begin{table}[t]",
                      r"\centering", rf"\caption{{{latex_text(table.caption)}}}", rf"\label{{tab:{table.name}}}",
                      rf"\begin{{tabular}}{{{table.align}}}", r"\toprule", _latex_row(map(latex_text, table.header)),
                      r"\midrule", *body, r"\bottomrule", r"\end{tabular}",
                      *(notes if table.footnotes else []), r"\end{table}", ""])


def markdown_text(text: str) -> str:
    return "".join(MARKDOWN_SPECIALS.get(ch, ch) for ch in text.replace("\n", " "))


def as_markdown(table: TextTable) -> str:
    """The table as a GitHub pipe table: the caption above, the same cells (a mark after its cell), the footnotes."""
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    rule = {"l": ":---", "c": ":---:", "r": "---:"}
    lines = [f"**{markdown_text(table.caption)}**", "", line(map(markdown_text, table.header)),
             line(rule[a] for a in table.align)]
    lines += [line(markdown_text(c.text + c.mark) for c in cells) for cells in table.rows]
    notes = [markdown_text(mark + (" " if mark else "") + text) for mark, text in table.footnotes]
    return "\n".join(lines + ([""] + ["\n\n".join(notes)] if notes else []) + [""])


# --- files -----------------------------------------------------------------------------------------------------------
def output_folder(directory) -> Path:
    """The folder tables are written into, made where missing; a path that is a file (or runs through one) is refused
    in one line, before anything is written."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file, not a folder: name a folder for the tables")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"cannot make the folder {path}: a part of its path is a file") from None
    return path


def write_tables(shown, directory, name: str | None = None, latex: bool = True, markdown: bool = True) -> list[Path]:
    """Write each table of `shown` (text_tables) into `directory` as <name>.tex and <name>.md, each atomically;
    returns the paths written."""
    folder = output_folder(directory)
    paths = []
    for table in text_tables(shown, name):
        paths += [write_text_atomic(folder / f"{table.name}.tex", as_latex(table))] if latex else []
        paths += [write_text_atomic(folder / f"{table.name}.md", as_markdown(table))] if markdown else []
    return paths
