"""The tables a paper needs (issue 69 item 5): every table a notebook saves, and so every table the report shows, as
LaTeX (booktabs) and Markdown, from a notebook (`ex.save_table(..., latex=True, markdown=True)`) and for the whole
report (`cse-kit report --latex DIR --markdown DIR`). Nothing is compiled: each written table is parsed as a tabular
(and as a pipe table) and its cells must hold the record's numbers (mean, std, the paper's value, Δ, the untrained
start) and the HTML's marks, computed here from the runs the tables were made of."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from cse_kit import cli
from cse_kit import experiments as ex
from cse_kit.data.published import paper_table
from cse_kit.experiments import render, typeset
from cse_kit.papers.comparison import significance_matrix
from cse_kit.results import ResultStore

COLUMNS = ["STS12", "STS-B", "Avg."]
LEVEL = 0.05
ESCAPED = "acc_% & #1"  # a column name with LaTeX's special characters


# --- what the tables are made of -------------------------------------------------------------------------------------
def _runs() -> pd.DataFrame:
    """Runs over seeds as run_rows gives them: one row near the paper (Δ within tolerance), one far below it, one
    seed with its untrained start, one that did not run; random numbers (seeded), never the numbers checked."""
    rng = np.random.default_rng(69)
    published = paper_table(1, "diffcse")
    lines = []
    for row, offset, seeds in (("SimCSE-BERT-base", 0.0, 3), ("DiffCSE-BERT-base", -5.0, 3),
                               ("SimCSE-BERT-base (reproduce)", -20.0, 1)):
        for seed in range(seeds):
            values = {c: float(published.loc[row, c]) + offset + rng.normal(0, 0.3) for c in COLUMNS}
            start = {ex.START_COLUMN + c: rng.uniform(20, 40) for c in COLUMNS} if seeds == 1 else {}
            lines.append({"row": row, "seed": seed, "status": "ok", "reason": "", "missing": "", **values, **start,
                          **({"start": "untrained bert (avg)"} if start else {})})
    lines.append({"row": "DiffCSE-RoBERTa-base", "seed": 0, "status": "not run", "reason": "needs the Hub",
                  "missing": "roberta-base"})
    return pd.DataFrame(lines)


def _matrix_tests() -> dict:
    rng = np.random.default_rng(5)
    methods = ["SimCSE", "DiffCSE", "my_method"]
    return {(x, y): (float(rng.normal(0, 2)), float(rng.uniform(0, 0.1))) for x in methods for y in methods if x != y}


@pytest.fixture
def saved(tmp_path):
    """The tables two notebooks saved (DiffCSE Table 1 and the head-to-head's extra tables), written as LaTeX and
    Markdown by save_table, and the runs and tests they were made of."""
    store = ResultStore(tmp_path / "results")
    s = ex.Setup("smoke", [0, 1, 2], store)
    runs, tests = _runs(), _matrix_tests()
    comparison = ex.compare(runs, 1, COLUMNS)
    ex.save_table(s, "table1_sts", "Table 1: STS test", comparison, notes=["a note with 50% & an_underscore"],
                  latex=True, markdown=True)
    cost = pd.DataFrame({"method": ["SimCSE", "my_method"], ESCAPED: np.random.default_rng(1).uniform(0, 100, 2)})
    ex.save_table(s, "compare_methods", "All methods", paper=None, latex=True, markdown=True,
                  extra={"significance_level": LEVEL,
                         "tables": {"cost": cost.to_dict("records"),
                                    "paper recipe: paired t-test over seeds":
                                        significance_matrix(tests, LEVEL).reset_index().to_dict("records")}})
    return store.root, runs, tests, cost


# --- parsing what was written ----------------------------------------------------------------------------------------
def parse_tabular(tex: str) -> list[list[str]]:
    """The rows (header first) of the one tabular in tex, each a list of its cells; asserts what makes it a booktabs
    tabular: \\toprule, header, \\midrule, rows, \\bottomrule, every row as many cells as the column spec."""
    found = re.findall(r"\\begin\{tabular\}\{([lcr]+)\}\n(.*?)\n\\end\{tabular\}", tex, re.S)
    assert len(found) == 1, tex
    spec, body = found[0]
    lines = [line for line in body.split("\n") if line != r"\addlinespace"]
    assert lines[0] == r"\toprule" and lines[2] == r"\midrule" and lines[-1] == r"\bottomrule", lines
    rows = [lines[1]] + lines[3:-1]
    assert r"\toprule" not in rows and r"\midrule" not in rows and r"\bottomrule" not in rows
    cells = []
    for row in rows:
        assert row.endswith(r" \\"), row
        cells.append([c.strip() for c in re.split(r"(?<!\\)&", row[:-3])])
        assert len(cells[-1]) == len(spec), (spec, row)
        for cell in cells[-1]:
            assert cell.count("{") == cell.count("}") and len(re.findall(r"(?<!\\)\$", cell)) % 2 == 0, cell
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") == 1
    return cells


def latex_to_text(cell: str) -> str:
    """A LaTeX cell read back as the HTML's text: its numbers, ± and the marks († and *) after it."""
    cell = re.sub(r"\\mathrm\{e\}\{([+-]\d+)\}", r"e\1", cell)
    cell = cell.replace(r"\textsuperscript{\dag}", "†").replace(r"\textsuperscript{*}", "*")
    cell = cell.replace(r" \pm ", " ± ").replace("$", "")
    for symbol, command in typeset.LATEX_SYMBOLS.items():
        cell = cell.replace(rf"\ensuremath{{{command}}}", symbol)
    for symbol, command in sorted(typeset.LATEX_TEXT_SYMBOLS.items(), key=lambda item: -len(item[1])):
        cell = cell.replace(command, symbol)  # --- before --
    return cell.replace(r"\_", "_").replace(r"\%", "%").replace(r"\&", "&").replace(r"\#", "#")


def parse_pipe_table(md: str) -> list[list[str]]:
    """The rows (header first) of the one pipe table in md, each cell unescaped; every row as many cells as the
    alignment row."""
    lines = [line for line in md.split("\n") if line.startswith("|")]
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    assert all(re.fullmatch(r":?---:?", c) for c in split[1]), lines[1]
    assert all(len(row) == len(split[1]) for row in split), lines
    return [[re.sub(r"\\(.)", r"\1", c) for c in row] for row in [split[0]] + split[2:]]


def _lines(rows: list[list[str]]) -> dict[tuple[str, str], list[str]]:
    """(row label, line kind) -> its cells, from a comparison's rows (a blank label continues the row above)."""
    out, label = {}, None
    for cells in rows[1:]:
        label = cells[0] or label
        out[(label, cells[1])] = cells[2:]
    return out


def _close(text: str, value: float) -> None:
    """text is value as printed: within half a unit of its last printed digit."""
    digits = len(text.partition(".")[2].partition("e")[0])
    assert abs(float(text) - value) <= 0.5 * 10 ** -digits + 1e-9, (text, value)


# --- the checks ------------------------------------------------------------------------------------------------------
def check_comparison(rows: list[list[str]], runs: pd.DataFrame) -> None:
    """Each cell of a written comparison holds what the runs give: the paper's value, mean ± std over the seeds (a
    lone seed's value with "(n=1)"), Δ = ours − paper with † exactly where it is outside the tolerance, the untrained
    start and ours − start; a row that did not run says so."""
    published, tolerance = paper_table(1, "diffcse"), render.DEFAULT_TOLERANCE
    lines = _lines(rows)
    assert rows[0] == ["", ""] + COLUMNS
    for (label, kind), cells in lines.items():
        ok = runs[(runs.row == label) & (runs.status == "ok")]
        for column, cell in zip(COLUMNS, cells):
            values, paper = ok[column].to_numpy(float), float(published.loc[label, column])
            if kind == "paper":
                _close(cell, paper)
            elif kind == "ours" and not len(values):
                assert cell == "not run"
            elif kind == "ours":
                mean, _, rest = cell.partition(" ± ")
                _close(mean.removesuffix(" (n=1)"), values.mean())
                assert (rest == "") == (len(values) == 1) == cell.endswith(" (n=1)")
                if rest:
                    _close(rest, values.std(ddof=1))
            elif kind == "Δ" and len(values):
                outside = abs(values.mean() - paper) > tolerance
                assert cell.endswith("†") == outside, (label, column, cell)
                _close(cell.removesuffix("†"), values.mean() - paper)
            elif kind == "start" and label in set(ok[ok.start.notna()].row):
                start = float(ok[ex.START_COLUMN + column].iloc[0])
                value, _, diff = cell.partition(" (")
                _close(value, start)
                _close(diff.removesuffix(")"), values.mean() - start)
    assert {kind for _, kind in lines} == {"paper", "ours", "Δ", "start"}
    assert lines[("DiffCSE-RoBERTa-base", "ours")] == ["not run"] * len(COLUMNS)


def check_matrix(rows: list[list[str]], tests: dict) -> None:
    """The significance matrix: each difference as printed, starred exactly where its p < level (as in the HTML)."""
    header = rows[0]
    for cells in rows[1:]:
        for column, cell in zip(header[1:], cells[1:]):
            if (cells[0], column) not in tests:
                assert cell == ""
                continue
            diff, p = tests[(cells[0], column)]
            assert cell.endswith("*") == (p < LEVEL), (cells[0], column, cell, p)
            _close(cell.removesuffix("*"), diff)


def check_cost(rows: list[list[str]], cost: pd.DataFrame) -> None:
    assert rows[0] == list(cost.columns)
    for cells, (_, record) in zip(rows[1:], cost.iterrows()):
        assert cells[0] == record["method"]
        _close(cells[1], record[ESCAPED])


def _read(folder, name: str) -> tuple[list[list[str]], list[list[str]], str]:
    """(LaTeX rows read back as text, Markdown rows, the .tex) of one written table."""
    tex = (folder / f"{name}.tex").read_text()
    latex_rows = [[latex_to_text(c) for c in row] for row in parse_tabular(tex)]
    return latex_rows, parse_pipe_table((folder / f"{name}.md").read_text()), tex


def check_written(folder, runs, tests, cost) -> None:
    """Every table of both notebooks, as LaTeX and as Markdown: the same cells, holding the runs' numbers."""
    latex_rows, md_rows, tex = _read(folder, "table1_sts")
    assert latex_rows == md_rows
    check_comparison(md_rows, runs)
    assert r"\textsuperscript{\dag}~" in tex and "outside its tolerance" in tex  # the mark's footnote
    assert r"not run: 1 row (roberta-base): needs the Hub" in tex and r"50\% \& an\_underscore" in tex
    latex_rows, md_rows, tex = _read(folder, "compare_methods-paper-recipe-paired-t-test-over-seeds")
    assert latex_rows == md_rows
    check_matrix(md_rows, tests)
    assert f"p < {LEVEL:g}" in tex and r"\textsuperscript{*}~" in tex and r"my\_method" in tex
    latex_rows, md_rows, tex = _read(folder, "compare_methods-cost")
    assert latex_rows == md_rows and r"acc\_\% \& \#1" in tex
    check_cost(md_rows, cost)


def test_a_notebooks_tables_are_written_as_latex_and_markdown_with_the_records_numbers(saved):
    root, runs, tests, cost = saved
    check_written(root / "tables", runs, tests, cost)
    assert sorted(p.name for p in (root / "tables").glob("*.tex")) == [
        "compare_methods-cost.tex", "compare_methods-paper-recipe-paired-t-test-over-seeds.tex", "table1_sts.tex"]


def test_what_a_notebook_shows_is_written_where_it_asks(saved, tmp_path):
    """ex.write_tables takes what ex.show and ex.show_values returned, as a notebook displays them."""
    _, runs, _, cost = saved
    folder = tmp_path / "mine"
    ex.write_tables(ex.show(ex.compare(runs, 1, COLUMNS), "Table 1"), folder, name="table1")
    ex.write_tables(ex.show_values(cost.set_index("method"), "cost"), folder, markdown=False)
    assert sorted(p.name for p in folder.iterdir()) == ["cost.tex", "table1.md", "table1.tex"]
    latex_rows, md_rows, _ = _read(folder, "table1")
    assert latex_rows == md_rows
    check_comparison(md_rows, runs)
    check_cost([[latex_to_text(c) for c in row] for row in parse_tabular((folder / "cost.tex").read_text())], cost)


def test_the_latex_marks_what_the_html_colours_red(saved):
    """The HTML colours a Δ outside its tolerance red; the LaTeX marks the same cells † (a setting's "differs" is
    red and says it in words)."""
    root, runs, _, _ = saved
    saved_table = json.loads((root / "tables" / "table1_sts.json").read_text())
    html = render.paper_layout_html(ex.comparison_frame(saved_table["comparison"]))
    red = re.findall(rf"color:{render.RED}'>([^<]+)<", html)
    tex = (root / "tables" / "table1_sts.tex").read_text()
    assert red and len(red) == tex.count(r"\textsuperscript{\dag}") - 1  # less the footnote's
    assert all(f"${number}$" + r"\textsuperscript{\dag}" in tex for number in red)
    settings = ex.side_by_side(12, {"BERT-base": {"batch size": 64, "λ": 0.01}}, tolerance=0)
    (table,) = typeset.comparison_tables(settings, "Table 12", "t12")
    assert "differs" in typeset.as_latex(table) and r"\dag" not in typeset.as_latex(table)


def test_cse_kit_report_writes_every_saved_table_and_executes_nothing(saved, tmp_path, capsys):
    root, runs, tests, cost = saved
    out = tmp_path / "paper" / "tables"
    assert cli.main(["report", "--latex", str(out), "--markdown", str(out), "--results-dir", str(root)]) == 0
    said = capsys.readouterr().out
    assert "wrote 3 LaTeX and 3 Markdown tables of the smoke profile" in said and "nothing executed" in said
    check_written(out, runs, tests, cost)
    for written in out.iterdir():  # what the notebook wrote beside its table, the same
        assert written.read_text() == (root / "tables" / written.name).read_text(), written.name
    assert not (tmp_path / "reports").exists() and not (root / "runs").exists()


def test_a_bad_folder_or_an_empty_store_is_one_line(saved, tmp_path, capsys):
    root = saved[0]
    a_file = tmp_path / "tables.tex"
    a_file.write_text("mine")
    for folder in (a_file, a_file / "below"):
        assert cli.main(["report", "--latex", str(folder), "--results-dir", str(root)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(folder) in err and "file" in err, err
    assert a_file.read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", "--markdown", str(tmp_path / "md"), "--results-dir", str(tmp_path / "empty")]) == 2
    assert "no saved tables" in capsys.readouterr().err and not list((tmp_path / "md").glob("*"))


@pytest.mark.parametrize("text,latex", [("a_b 50% & #1 {x} ~^\\", r"a\_b 50\% \& \#1 \{x\} \textasciitilde{}"
                                        r"\textasciicircum{}\textbackslash{}"),
                                       ("λ ≤ 0.1 — ♣", r"\ensuremath{\lambda} \ensuremath{\leq} 0.1 --- "
                                        r"\ensuremath{\clubsuit}")])
def test_names_are_escaped_for_latex(text, latex):
    assert typeset.latex_text(text) == latex


def test_numbers_are_set_in_math_and_scientific_ones_keep_their_printed_digits():
    cells = [typeset.Cell("84.30 ± 0.40", True), typeset.Cell("5.80e-06 ± 1.0e-08", True),
             typeset.Cell("84.56 (n=1)", True), typeset.Cell("-1.23", True, typeset.DAGGER),
             typeset.Cell("1.01M", True), typeset.Cell("12 (STS): BERT-base")]
    assert [typeset.latex_cell(c) for c in cells] == [
        r"$84.30 \pm 0.40$", r"$5.80\mathrm{e}{-06} \pm 1.0\mathrm{e}{-08}$", "$84.56$ (n=1)",
        r"$-1.23$\textsuperscript{\dag}", "$1.01$M", "12 (STS): BERT-base"]
    assert math.isclose(float(latex_to_text(typeset.latex_cell(cells[1])).split(" ± ")[0]), 5.8e-6)
