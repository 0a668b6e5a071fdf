"""The four papers' published numbers (cse_kit/papers/values/<paper>.json) against the spec's transcription
(papers.md §5, §2.2 and §2.5 for the hyper-parameter tables), cell by cell; the averages the papers print; the
artefact inventory; and the registry of released checkpoints (cse_kit/papers/released.json). No model, no data."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from cse_kit.eval.encode import POOLERS

from conftest import REPO, SHARED

VALUES = REPO / "cse_kit" / "papers" / "values"
RELEASED = REPO / "cse_kit" / "papers" / "released.json"
PAPERS_MD = Path(SHARED) / "spec" / "papers.md"
PAPERS = {"diffcse": "DiffCSE", "scd": "SCD", "esimcse": "ESimCSE", "diffaug": "DiffAug"}
SECTIONS = {"diffcse": "5.1", "scd": "5.2", "esimcse": "5.3", "diffaug": "5.4"}
#: data-bearing artefacts per paper (the issue's inventory: 42 in all)
DATA_ARTEFACTS = {
    "diffcse": [f"Table {i}" for i in range(1, 16)] + ["Figure 2"],
    "scd": ["Table 1", "Table 2", "Table 3", "Figure 2"],
    "esimcse": [f"Table {i}" for i in range(1, 12)],
    "diffaug": [f"Table {i}" for i in range(1, 9)] + ["Figure 3", "Figure 4", "Figure 5"],
}
SCHEMATIC = {"diffcse": ["Figure 1"], "scd": ["Figure 1"], "esimcse": ["Figure 1"], "diffaug": ["Figure 1", "Figure 2"]}
#: provenance symbols the papers put after a row label (or a cell); "* " before a label marks the authors' runs
MARK_SYMBOLS = "♣♡♢♠†◇△♯"
#: tables whose papers.md layout is transposed in the JSON (one JSON row per papers.md value column):
#: (paper, table) -> (where the markdown table is, its value columns, the JSON row labels, how a JSON column is named)
TRANSPOSED = {
    ("diffcse", "12"): ("2.2", [1, 2], ["BERT-base", "RoBERTa-base"], lambda cells: cells[0]),
    ("diffcse", "13"): ("2.2", [3, 4], ["BERT-base", "RoBERTa-base"], lambda cells: cells[0]),
    ("diffaug", "5"): ("2.5", [2, 3, 4], ["Semi-supervised w/o aux", "Semi-supervised w/ aux", "Supervised (w/o aux)"],
                       lambda cells: f"{cells[0].lower()} {cells[1]}"),
    ("diffaug", "8"): ("5.4", [2], ["STS-B dev."], None),
}
#: tables with two label columns in papers.md: (paper, table) -> JSON row label from the two
TWO_LABELS = {("esimcse", "7"): lambda model, ld: f"{model} (LD {ld})"}
#: non-numeric tables, kept under "examples"
EXAMPLES = {("diffcse", "9"), ("esimcse", "2")}
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


# ---------------------------------------------------------------------------------------------- papers.md parsing
def _spec_text() -> str:
    if not PAPERS_MD.is_file():
        pytest.fail(f"{PAPERS_MD} is missing; clone the project with ../shared beside it or set CSE_KIT_SHARED")
    return PAPERS_MD.read_text(encoding="utf-8")


def _section(text: str, number: str) -> str:
    """The text of section `### <number> ...` up to the next heading of level 2 or 3."""
    match = re.search(rf"^### {re.escape(number)} .*?$(.*?)(?=^##)", text, re.S | re.M)
    assert match, f"papers.md has no section {number}"
    return match.group(1)


def _split_row(line: str) -> list[str]:
    return line.strip()[1:-1].split("|")


def _md_tables(section: str) -> dict[str, list[list[str]]]:
    """Each `**Table N**` of a section -> its markdown table (header first, separator dropped, cells unstripped)."""
    tables, current = {}, None
    for line in section.splitlines():
        heading = re.match(r"\*\*Table (\d+)\*\*", line)
        if heading:
            current = heading.group(1)
        elif line.startswith("|") and current is not None:
            cells = _split_row(line)
            if not all(re.fullmatch(r"-+", c.strip()) for c in cells):
                tables.setdefault(current, []).append(cells)
        elif tables.get(current) and not line.strip().startswith("|"):
            current = None  # only the first markdown table after a heading
    return tables


def _first_md_table(section: str, after: str) -> list[list[str]]:
    lines = section[section.index(after):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = _split_row(line)
        if not all(re.fullmatch(r"-+", c.strip()) for c in cells):
            rows.append(cells)
    return rows


def number(cell: str) -> tuple[float | None, float | None, str | None]:
    """A printed cell -> (value, std, cell mark): "84.09 (+1.64)" -> 84.09; "75.28±.0" -> (75.28, 0.0);
    "76.25♡" -> (76.25, None, "♡"); "-" -> None; "0.3%", "36 min.", "10 GB", "110M" -> the number; "1 × 10⁻⁴" -> 1e-4."""
    text = cell.strip()
    mark = next((s for s in MARK_SYMBOLS if s in text), None)
    text = text.replace(mark, "") if mark else text
    if text == "-":
        return None, None, mark
    power = re.fullmatch(r"([\d.]+) × 10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", text)
    if power:
        return float(power.group(1)) * 10 ** int(power.group(2).translate(SUPERSCRIPT)), None, mark
    match = re.match(r"(-?\d*\.?\d+(?:e-?\d+)?)(?:±(\d*\.?\d+))?", text)
    assert match, f"cannot read a number from {cell!r}"
    std = float(match.group(2)) if match.group(2) else None
    return float(match.group(1)), std, mark


def row_label(cell: str) -> tuple[str, str | None]:
    """A printed row label -> (label without its provenance mark, the mark)."""
    text = cell.strip()
    mark = None
    if text.startswith("* "):
        mark, text = "*", text[2:]
    for symbol in MARK_SYMBOLS:
        if symbol in text:
            mark, text = symbol, text.replace(symbol, " ")
    return re.sub(r"\s+", " ", text).strip(), mark


def _group_header(cells: list[str]) -> str | None:
    first = cells[0].strip()
    if re.fullmatch(r"\*[^*].*\*", first) and not any(c.strip() for c in cells[1:]):
        return first[1:-1]
    return None


def expected_table(paper: str, table: str, text: str | None = None) -> dict:
    """papers.md's Table `table` of `paper` in the JSON layout: columns, rows, std, marks, cell_marks, groups."""
    text = text or _spec_text()
    out = {"columns": [], "rows": {}, "std": {}, "marks": {}, "cell_marks": {}, "groups": {}}
    if (paper, table) in TRANSPOSED:
        where, value_cols, labels, column_name = TRANSPOSED[paper, table]
        section = _section(text, where)
        if where == "2.2":
            md = _first_md_table(section, "Table 12 (STS models)")
        elif where == "2.5":
            md = _first_md_table(section, "**Hyper-parameters** (Table 5")
        else:
            md = _md_tables(section)[table]
        body = md[1:]
        for label, col in zip(labels, value_cols):
            out["rows"][label] = [number(cells[col])[0] for cells in body]
        if column_name:
            out["columns"] = [column_name([c.strip() for c in cells]) for cells in body]
        else:  # DiffAug Table 8: the α column names the JSON columns (checked by value in test_transposed_sweep)
            out["columns"] = [None] * len(body)
        return out
    md = _md_tables(_section(text, SECTIONS[paper]))[table]
    n_labels = 2 if (paper, table) in TWO_LABELS else 1
    out["columns"] = [c.strip() for c in md[0][n_labels:]]
    group, parent, seen = None, None, set()
    for cells in md[1:]:
        header = _group_header(cells)
        if header:
            group = header
            continue
        label, mark = row_label(cells[0])
        if n_labels == 2:
            label = TWO_LABELS[paper, table](label, cells[1].strip())
        if cells[0].startswith("  ") and parent:  # an indented variant of the row above ("  w/ MLM")
            label = f"{parent} {label}"
        else:
            parent = label
        if label in seen:  # the same method in a later block (DiffAug: SimCSE unsupervised and supervised)
            label = f"{label} ({group.split()[0].lower()})"
        seen.add(label)
        parsed = [number(c) for c in cells[n_labels:]]
        out["rows"][label] = [v for v, _, _ in parsed]
        if any(s is not None for _, s, _ in parsed):
            out["std"][label] = [s for _, s, _ in parsed]
        if mark:
            out["marks"][label] = mark
        cell_marks = {col: m for col, (_, _, m) in zip(out["columns"], parsed) if m}
        if cell_marks:
            out["cell_marks"][label] = cell_marks
        if group:
            out["groups"][label] = group
    return out


# ------------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def spec_text():
    return _spec_text()


@pytest.fixture(scope="module")
def values():
    return {key: json.loads((VALUES / f"{key}.json").read_text(encoding="utf-8")) for key in PAPERS}


def _numeric_tables(text: str):
    for paper, number_ in SECTIONS.items():
        for table in _md_tables(_section(text, number_)):
            if (paper, table) not in EXAMPLES:
                yield paper, table
    yield from [("diffcse", "12"), ("diffcse", "13"), ("diffaug", "5")]


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------- (a) every cell, every table
def test_every_spec_table_is_in_the_json(spec_text, values):
    """All tables papers.md transcribes, and no other numeric table."""
    expected = sorted(_numeric_tables(spec_text))
    assert len(expected) == 14 + 3 + 10 + 8  # DiffCSE 1-8,10-15; SCD 1-3; ESimCSE 1,3-11; DiffAug 1-8
    found = sorted((paper, t) for paper in PAPERS for t in values[paper]["tables"])
    assert found == expected


def test_every_cell_matches_the_spec(spec_text, values):
    checked = 0
    for paper, table in _numeric_tables(spec_text):
        want = expected_table(paper, table, spec_text)
        got = values[paper]["tables"][table]
        where = f"{PAPERS[paper]} Table {table}"
        assert list(got["rows"]) == list(want["rows"]), f"{where}: row labels differ"
        assert len(got["columns"]) == len(want["columns"]), f"{where}: columns differ"
        if want["columns"][0] is not None:
            assert got["columns"] == want["columns"], f"{where}: column labels differ"
        for label, cells in want["rows"].items():
            assert len(got["rows"][label]) == len(cells), f"{where} {label!r}: row length"
            for column, a, b in zip(got["columns"], got["rows"][label], cells):
                assert _same(a, b), f"{where} ({label!r}, {column!r}): json {a} vs papers.md {b}"
                checked += 1
        assert got.get("std", {}) == want["std"], f"{where}: std differs"
        assert got.get("marks", {}) == want["marks"], f"{where}: row marks differ"
        assert got.get("cell_marks", {}) == want["cell_marks"], f"{where}: cell marks differ"
        assert got.get("groups", {}) == want["groups"], f"{where}: groups differ"
        for field in ("title", "metric"):
            assert got.get(field), f"{where} has no {field}"
    assert checked > 900


def test_transposed_sweep_names_its_values(spec_text, values):
    """DiffAug Table 8 is one row, α as columns: each column names the α of its papers.md row."""
    md = _md_tables(_section(spec_text, "5.4"))["8"][1:]
    columns = values["diffaug"]["tables"]["8"]["columns"]
    for cells, column in zip(md, columns):
        alpha = number(cells[1])[0]
        if alpha is None:
            assert cells[0].strip() == "False" and column == "no aux loss"
        else:
            assert float(column) == pytest.approx(alpha, rel=1e-9)


def test_examples_match_the_spec(spec_text, values):
    """DiffCSE Table 9 (retrieved sentences) and ESimCSE Table 2 (texts with their similarity), word for word."""
    md9 = _md_tables(_section(spec_text, "5.1"))["9"][1:]
    example = values["diffcse"]["examples"]["9"]
    query = -1
    for cells in md9:
        cells = [c.strip() for c in cells]
        if cells[0]:
            query += 1
            assert example["queries"][query] == cells[0]
        rank = int(cells[1]) - 1
        assert example["rows"]["SimCSE-BERT-base"][query][rank] == cells[2]
        assert example["rows"]["DiffCSE-BERT-base"][query][rank] == cells[3]
    assert query == len(example["queries"]) - 1

    md2 = _md_tables(_section(spec_text, "5.3"))["2"][1:]
    rows = values["esimcse"]["examples"]["2"]["rows"]
    assert [(r["method"], r["text"], r["similarity"]) for r in rows] == [
        (c[0].strip(), c[1].strip(), float(c[2])) for c in md2]


# ---------------------------------------------------------------------------------------------------- (b) averages
def _avg_mismatch_rows(spec: dict) -> set[str]:
    avg_column = spec["avg"]["column"]
    return {n["row"] for n in spec.get("notes", []) if n.get("kind") == "avg_mismatch" and n["column"] == avg_column}


def _avg_cases(values):
    for paper in PAPERS:
        for table, spec in values[paper]["tables"].items():
            if "avg" in spec:
                yield paper, table, spec


def test_avg_specs_exist_where_the_paper_prints_an_average(values):
    with_avg = sorted((p, t) for p, t, _ in _avg_cases(values))
    assert with_avg == sorted([("diffcse", "1"), ("diffcse", "2"), ("scd", "1"), ("scd", "2"), ("esimcse", "3"),
                               ("esimcse", "7"), ("esimcse", "11"), ("diffaug", "1"), ("diffaug", "6")])


def test_printed_averages_are_the_means_of_their_rows(values):
    """Every row's Avg. is the mean of its cells (0.01; 0.015 for rows printed to one decimal), except rows whose
    note says the printed Avg. is inconsistent, and those must really be inconsistent."""
    flagged_total = 0
    for paper, table, spec in _avg_cases(values):
        columns = spec["columns"]
        avg_at = columns.index(spec["avg"]["column"])
        parts = [columns.index(c) for c in spec["avg"]["of"]]
        flagged = _avg_mismatch_rows(spec)
        assert flagged <= set(spec["rows"]), f"{paper} Table {table}: a note names an unknown row"
        flagged_total += len(flagged)
        for label, cells in spec["rows"].items():
            mean = sum(cells[i] for i in parts) / len(parts)
            one_decimal = all(abs(c * 10 - round(c * 10)) < 1e-6 for c in cells)
            tolerance = 0.015 if one_decimal else 0.01
            off = abs(mean - cells[avg_at])
            where = f"{PAPERS[paper]} Table {table} {label!r}: mean {mean:.4f} vs printed {cells[avg_at]}"
            if label in flagged:
                assert off > tolerance, f"{where} is consistent, yet a note flags it"
            else:
                assert off <= tolerance + 1e-9, f"{where}: a transcription error, or a note is missing"
    # "Avg. BERT embeddings" in DiffCSE and SCD Table 2; DiffAug Table 1 PromptBERT, SBERT; Table 6 two PromptBERT rows
    assert flagged_total == 6


def test_known_inconsistencies_are_noted_on_their_cells(values):
    """Each known inconsistency (papers.md §8) sits as a note on the cell(s) it concerns, saying what it is."""
    def noted(paper, table, row, column, *words):
        notes = values[paper]["tables"][table].get("notes", [])
        return any(n["row"] == row and n["column"] == column and all(w in n["note"] for w in words) for n in notes)

    assert noted("diffcse", "1", "DiffCSE-RoBERTa-base", "Avg.", "§4.3", "77.80")
    assert noted("diffcse", "2", "SimCSE-BERT-base", "Avg.", "§4.3", "85.56")
    assert noted("diffcse", "2", "Avg. BERT embeddings", "Avg.", "84.954")
    for row, column in [("SCD-BERT-base", "MR"), ("SCD-BERT-base", "SUBJ"), ("SimCSE-RoBERTa-base", "MR"),
                        ("SimCSE-RoBERTa-base", "SUBJ")]:
        assert noted("scd", "2", row, column, "Implausible")
    assert noted("scd", "2", "SCD-BERT-base", None, "README", "84.35")
    assert noted("scd", "2", "Avg. BERT embeddings", "Avg.", "84.954")
    # §3.3.2's margins over "the next best approach" against the table's: +4.6 vs +4.08, +2.2 vs +1.47
    assert noted("scd", "2", "SCD-BERT-base", "SUBJ", "§3.3.2", "+4.6", "4.08")
    assert noted("scd", "2", "SCD-BERT-base", "MRPC", "§3.3.2", "+2.2", "1.47")
    assert noted("esimcse", "3", None, "STS15", "SICK15") and noted("esimcse", "7", None, "STS15", "SICK15")
    assert noted("esimcse", "5", "+Word Repetition", "STS-B", "84.40", "our inference")
    assert noted("esimcse", "4", "+ word repetition", "STS-B", "84.40", "our inference")
    assert noted("esimcse", "6", "STS-B", "wr", "84.40", "our inference")
    assert noted("esimcse", "3", "Mirror-BERT-base", "Avg.", "75.41")
    assert noted("esimcse", "3", "Mirror-RoBERTa-base", "Avg.", "76.39")
    assert noted("diffaug", "6", "PromptBERT_joint", "Avg.", "79.57")
    assert noted("diffaug", "6", "PromptBERT_sup-unsup", "Avg.", "79.70")
    assert noted("diffaug", "1", "PromptBERT", "Avg.", "78.52")
    assert noted("diffaug", "1", "SBERT", "Avg.", "74.86", "♡")  # re-evaluated by Gao et al.: not "original paper"
    assert noted("diffaug", "5", "Supervised (w/o aux)", "stage 2 batch size", "gradient_accumulation_steps")


def test_inferences_are_marked_as_ours(values):
    """What a note or metric states beyond the paper's text says so: DiffCSE Table 8's λ = 0 as SimCSE with the
    BatchNorm projector, ESimCSE Tables 1/7's absolute difference."""
    lam = values["diffcse"]["tables"]["8"]["notes"]
    assert any(n["column"] == "0" and "our inference" in n["note"] for n in lam)
    for table in ("1", "7"):
        metric = values["esimcse"]["tables"][table]["metric"]
        assert "not stated in the paper; we read it as |prediction − normalised gold|" in metric


def test_no_citation_of_the_internal_transcription():
    """Notes, sources, docstrings, docs and notebooks cite the papers (or the official code), never papers.md, which
    a clone of the project does not have."""
    files = [*(REPO / "cse_kit").rglob("*.py"), *(REPO / "cse_kit").rglob("*.json"), *(REPO / "docs").glob("*.md"),
             *(REPO / "notebooks").glob("*.py"), REPO / "README.md"]
    citing = [str(f.relative_to(REPO)) for f in files if "papers.md" in f.read_text(encoding="utf-8")]
    assert not citing


def test_notes_name_real_cells(values):
    for paper in PAPERS:
        for table, spec in values[paper]["tables"].items():
            for note in spec.get("notes", []):
                assert note["row"] is None or note["row"] in spec["rows"], (paper, table, note)
                assert note["column"] is None or note["column"] in spec["columns"], (paper, table, note)
                assert note["note"].strip(), (paper, table, note)


# --------------------------------------------------------------------------------------------------- (c) artefacts
def test_artefact_inventory(values):
    data_bearing = 0
    for paper, name in PAPERS.items():
        spec = values[paper]
        assert spec["paper"] == name and spec["key"] == paper
        for field in ("title", "venue", "source", "marks"):
            assert spec[field], f"{name} has no {field}"
        ids = [a["id"] for a in spec["artefacts"]]
        assert len(ids) == len(set(ids)), f"{name}: an artefact is listed twice"
        data = [a["id"] for a in spec["artefacts"] if a["data"]]
        assert sorted(data) == sorted(DATA_ARTEFACTS[paper]), name
        assert sorted(set(ids) - set(data)) == SCHEMATIC[paper], name
        data_bearing += len(data)
        for artefact in spec["artefacts"]:
            assert artefact["kind"] == artefact["id"].split()[0].lower() and artefact["title"], artefact
            number_ = artefact["id"].split()[1]
            if artefact["data"] and artefact["kind"] == "table":
                assert number_ in spec["tables"] or number_ in spec.get("examples", {}), f"{name} {artefact['id']}"
            if artefact["data"] and artefact["kind"] == "figure":
                assert number_ in spec["figures"], f"{name} {artefact['id']}"
        for kind, entries in (("Table", spec["tables"]), ("Figure", spec["figures"]), ("Table", spec["examples"])):
            for number_ in entries:
                assert f"{kind} {number_}" in data, f"{name}: {kind} {number_} is not a data-bearing artefact"
        # paper order: tables and figures each in ascending number
        for kind in ("Table", "Figure"):
            numbers = [int(i.split()[1]) for i in ids if i.startswith(kind)]
            assert numbers == list(range(1, len(numbers) + 1)), f"{name}: {kind}s out of order"
    assert data_bearing == 42


def test_marks_are_explained(values):
    for paper, spec in values.items():
        used = {m for t in spec["tables"].values() for m in t.get("marks", {}).values()}
        used |= {m for t in spec["tables"].values() for cm in t.get("cell_marks", {}).values() for m in cm.values()}
        assert used <= set(spec["marks"]), f"{PAPERS[paper]}: marks without a meaning: {used - set(spec['marks'])}"


def test_figure_points(spec_text, values):
    """The only figure coordinates a text gives: SCD's in SCD Figure 2, as papers.md states them."""
    figure = _section(spec_text, "5.2").split("**Figure 2**")[1]
    stated = {name: float(re.search(rf"\*\*{name} ([−-]?[\d.]+)\*\*", figure).group(1).replace("−", "-"))
              for name in ("alignment", "uniformity")}
    assert values["scd"]["figures"]["2"]["points"]["SCD-BERT-base"] == stated


# ------------------------------------------------------------------------------------------ (d) released checkpoints
def _check_release(entry, values):
    assert entry["paper"] in set(PAPERS) | {"simcse"}, entry  # simcse: the baseline all four papers compare with
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", entry["id"]), entry
    assert entry["backbone"] and entry["source"].startswith("https://github.com/"), entry
    rows = [entry["row"]] + [e["row"] for e in entry["expected"]]
    for ref in rows:
        assert ref["label"] in values[ref["paper"]]["tables"][ref["table"]]["rows"], (entry["id"], ref)
    for expected in entry["expected"]:
        spec = values[expected["row"]["paper"]]["tables"][expected["row"]["table"]]
        printed = dict(zip(spec["columns"], spec["rows"][expected["row"]["label"]]))
        assert expected["values"] and set(expected["values"]) <= set(printed), (entry["id"], expected)
        if expected["from"] == "paper":
            assert expected["values"] == printed, (entry["id"], expected)
        else:
            assert expected["from"].startswith("https://github.com/"), (entry["id"], expected)
            assert all(isinstance(v, (int, float)) for v in expected["values"].values()), (entry["id"], expected)


def test_released_checkpoints(values):
    """Every released checkpoint names a known paper, a kit pooler, its row and where the id/pooler come from;
    numbers quoted "from paper" are the paper's cells."""
    released = json.loads(RELEASED.read_text(encoding="utf-8"))
    ids = [c["id"] for c in released["checkpoints"] + released["not_evaluable"]]
    assert len(ids) == len(set(ids))
    for entry in released["checkpoints"]:
        assert entry["pooler"] in POOLERS, entry
        _check_release(entry, values)
    for entry in released["not_evaluable"]:  # released, but not loadable as a plain encoder with a kit pooler
        assert entry["pooler"] is None and entry["reason"], entry
        _check_release(entry, values)
    papers = [c["paper"] for c in released["checkpoints"]]
    assert {p: papers.count(p) for p in set(papers)} == {"simcse": 4, "diffcse": 4, "scd": 2, "esimcse": 4,
                                                         "diffaug": 2}
    assert released["not_evaluable"] == []  # DiffAug's BertForCL checkpoints load with their prefix (prompt_mask)


def test_authors_numbers_agree_with_the_paper_but_scd_bert_transfer():
    """Where the authors quote numbers for a release beside its paper row, they agree cell for cell, except the SCD
    README's transfer row for SCD-BERT (papers.md §8 item 8), which must really differ."""
    released = json.loads(RELEASED.read_text(encoding="utf-8"))
    for entry in released["checkpoints"] + released["not_evaluable"]:
        paper_rows = {tuple(e["row"].values()): e["values"] for e in entry["expected"] if e["from"] == "paper"}
        for quoted in (e for e in entry["expected"] if e["from"] != "paper"):
            printed = paper_rows.get(tuple(quoted["row"].values()))
            if printed is None:
                continue
            same = all(_same(v, printed[c]) for c, v in quoted["values"].items())
            known = (entry["id"], quoted["row"]["table"]) in {
                ("sap-ai-research/BERT-base-uncased-SCD-ACL2022", "2"), ("Tianduo/diffaug-sup-bert-base-uncased", "1")}
            assert same != known, f"{entry['id']}: {quoted['from']} vs the paper"


# -------------------------------------------------------------------------------------- (e) row identity across tables
#: labels printed in several tables of one paper that mean the same run (or the same cited result) in each, so they
#: need no setting; every other label printed in two tables names different runs and carries a setting in each
SAME_RUN = {
    "diffcse": {"GloVe embeddings (avg.)", "IS-BERT-base", "CMLM-BERT-base (1TB data)",  # cited in Tables 1, 2
                "SimCSE-RoBERTa-base",  # ♢ published, in Tables 1 and 2
                "SimCSE",  # Tables 3, 15: one dev run (81.47 / 83.91); Table 14: its parameter count
                "STS-B"},  # Tables 7, 8: the metric of a one-row sweep (the column names the run)
    "scd": {"GloVe embeddings (avg.)", "IS-BERT-base", "SimCSE-BERT-base", "SCD-BERT-base", "SimCSE-RoBERTa-base",
            "SCD-RoBERTa-base"},  # one model per label in Tables 1 and 2 (the README: one checkpoint for both)
    "esimcse": {"ESimCSE", "SimCSE",  # BERT-base in Tables 4, 8, 11 (§5); SimCSE: the published one (our reading)
                "STS-B"},  # Tables 6, 9: the metric of a one-row sweep
    # App. C's joint training, and the supervised DiffAug, wherever printed (Table 7's backbone, RoBERTa-base, is
    # the table's: its title says it, as the backbone of every other table)
    "diffaug": {"ConSERT_joint", "SimCSE_joint", "PromptBERT_joint", "DiffAug (ours) (supervised)"},
}
#: the settings that tell the runs apart, as the papers describe them (§4.2-4.3 of DiffAug, App. A of DiffCSE)
EXPECTED_SETTINGS = {
    ("diffaug", "DiffAug (ours)"): {"1": "semi-supervised, w/o aux loss", "2": "semi-supervised, w/ aux loss",
                                    "4": "supervised", "7": "semi-supervised, w/ aux loss"},
    ("diffaug", "SimCSE"): {"1": "unsupervised", "2": "supervised", "4": "supervised", "7": "supervised"},
    ("diffaug", "PromptBERT"): {"1": "unsupervised", "2": "supervised", "4": "supervised"},
    ("diffcse", "DiffCSE-BERT-base"): {"1": "STS model", "2": "transfer model", "10": "STS model", "11": "STS model"},
    ("diffcse", "SimCSE-BERT-base"): {"1": "published (Gao et al., 2021)", "2": "published (Gao et al., 2021)",
                                      "10": "reproduced (DiffCSE authors)", "11": "reproduced (DiffCSE authors)"},
}


def _tables_by_label(spec: dict) -> dict[str, list[str]]:
    where = {}
    for number, table in spec["tables"].items():
        for label in table["rows"]:
            where.setdefault(label, []).append(number)
    return where


def test_a_label_that_names_different_runs_has_a_setting_in_each_table(values):
    for paper, spec in values.items():
        shared = {label: tables for label, tables in _tables_by_label(spec).items() if len(tables) > 1}
        assert SAME_RUN[paper] <= set(shared), f"{PAPERS[paper]}: SAME_RUN names labels printed once"
        for label, tables in shared.items():
            settings = {t: spec["tables"][t].get("settings", {}).get(label) for t in tables}
            if label in SAME_RUN[paper]:
                assert set(settings.values()) == {None}, f"{PAPERS[paper]} {label!r}: one run, yet {settings}"
            else:
                assert all(settings.values()) and len(set(settings.values())) > 1, (
                    f"{PAPERS[paper]} {label!r} is printed in Tables {tables}: give it its setting in each "
                    f"({settings}), or list it in SAME_RUN with why it is one run")
        for number, table in spec["tables"].items():
            assert set(table.get("settings", {})) <= set(table["rows"]), f"{PAPERS[paper]} Table {number}"
    for (paper, label), expected in EXPECTED_SETTINGS.items():
        assert {t: values[paper]["tables"][t]["settings"][label] for t in expected} == expected, (paper, label)
        assert set(expected) == set(_tables_by_label(values[paper])[label]), (paper, label)


def test_an_ambiguous_label_needs_its_setting():
    from cse_kit.data.published import paper_setting, paper_value

    with pytest.raises(KeyError, match=r"pass setting='semi-supervised, w/ aux loss'.*Table 1: 'semi-supervised, w/o"):
        paper_value(2, "DiffAug (ours)", "100%", "diffaug")
    with pytest.raises(KeyError, match="pass setting='unsupervised'"):
        paper_value(1, "SimCSE", "Avg.", "diffaug", setting="supervised")
    assert paper_value(2, "DiffAug (ours)", "100%", "diffaug", setting="semi-supervised, w/ aux loss") == 80.61
    assert paper_value(1, "DiffAug (ours)", "Avg.", "diffaug", setting="semi-supervised, w/o aux loss") == 80.13
    assert paper_value(1, "SimCSE", "Avg.", "diffaug", setting="unsupervised") == 76.25
    assert paper_value(2, "SimCSE", "100%", "diffaug", setting="supervised") == 81.58
    assert paper_value(2, "DiffCSE-BERT-base", "Avg.", setting="transfer model") == 86.86
    assert paper_value(11, "SimCSE-BERT-base", "STS", setting="reproduced (DiffCSE authors)") == 76.16
    assert paper_setting(4, "DiffAug (ours)", "diffaug") == "supervised"


def test_an_unambiguous_label_needs_no_setting():
    from cse_kit.data.published import paper_setting, paper_value

    assert paper_value(1, "DiffCSE", "Avg.", "diffaug") == 78.49
    assert paper_value(1, "DiffAug (ours) w/ aux loss", "Avg.", "diffaug") == 80.61
    assert paper_value(3, "ESimCSE-BERT-base", "Avg.", "esimcse") == 78.27
    assert paper_setting(1, "DiffAug (ours) w/ aux loss", "diffaug") is None
    with pytest.raises(KeyError, match="leave `setting` out"):
        paper_value(1, "DiffCSE", "Avg.", "diffaug", setting="unsupervised")
