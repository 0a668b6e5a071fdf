"""The papers' published numbers, as data: one JSON per paper under cse_kit/papers/values/ (transcribed from the
papers' texts, with their provenance marks, the known inconsistencies as notes that cite where in the paper they
are, and a setting for each row whose label names different runs in different tables), each number addressed by
paper, table, row and column (and the row's setting, where its label alone is ambiguous)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pandas as pd

VALUES_DIR = Path(__file__).parents[1] / "papers" / "values"
#: key -> the paper's name, in the order the report shows them (DiffCSE, the primary paper, first)
PAPERS = {"diffcse": "DiffCSE", "scd": "SCD", "esimcse": "ESimCSE", "diffaug": "DiffAug"}


def paper_key(paper: str) -> str:
    """`scd`, `SCD` -> `scd`; an unknown paper names the known ones."""
    key = paper.lower()
    if key not in PAPERS:
        raise KeyError(f"unknown paper {paper!r}; choose one of: {', '.join(PAPERS)}")
    return key


@lru_cache(maxsize=None)
def paper_spec(paper: str = "diffcse") -> dict:
    """Everything published for one paper: title, marks, artefacts, tables, figures, examples."""
    key = paper_key(paper)
    return json.loads((VALUES_DIR / f"{key}.json").read_text(encoding="utf-8"))


def paper_tables(paper: str = "diffcse") -> dict:
    return paper_spec(paper)["tables"]


def paper_table(table: int | str, paper: str = "diffcse") -> pd.DataFrame:
    """One table as a DataFrame: the paper's row labels as index, its column labels as columns."""
    tables = paper_tables(paper)
    if str(table) not in tables:
        raise KeyError(f"{PAPERS[paper_key(paper)]} Table {table} holds no numbers in "
                       f"{VALUES_DIR / (paper_key(paper) + '.json')}; tables: {', '.join(tables)}")
    spec = tables[str(table)]
    return pd.DataFrame.from_dict(spec["rows"], orient="index", columns=spec["columns"])


def paper_setting(table: int | str, row: str, paper: str = "diffcse") -> str | None:
    """The setting of a row whose label names different runs in different tables of its paper (DiffAug's "DiffAug
    (ours)": "semi-supervised, w/o aux loss" in Table 1, "semi-supervised, w/ aux loss" in Table 2); None for a label
    that means one run (or one cited result) wherever it is printed."""
    return paper_tables(paper)[str(table)].get("settings", {}).get(row)


def row_settings(row: str, paper: str = "diffcse") -> dict[str, str | None]:
    """Table -> the row's setting there, for every table of the paper that prints the label."""
    return {number: paper_setting(number, row, paper) for number, spec in paper_tables(paper).items()
            if row in spec["rows"]}


def check_setting(table: int | str, row: str, paper: str, setting: str | None) -> None:
    """Refuse a label that names different runs in different tables of its paper unless `setting` is this table's,
    and any `setting` that is not the row's: the message names the setting to pass and the label's in each table."""
    settings = row_settings(row, paper)
    own = settings[str(table)]
    if setting == own or (setting is None and len(set(settings.values())) == 1):
        return
    fix = f"pass setting={own!r}" if own is not None else "leave `setting` out"
    where = "; ".join(f"Table {number}: {value!r}" for number, value in settings.items())
    raise KeyError(f"{PAPERS[paper_key(paper)]} Table {table}, {row!r}: {fix} (got {setting!r}); the label's setting "
                   f"per table: {where}")


def paper_value(table: int | str, row: str, column: str, paper: str = "diffcse", setting: str | None = None) -> float:
    """One printed cell. A label that names different runs in different tables of its paper needs this table's
    `setting` (paper_setting), so that no lookup by table and label alone can pick the wrong run."""
    frame = paper_table(table, paper)
    if row not in frame.index or column not in frame.columns:
        raise KeyError(f"{PAPERS[paper_key(paper)]} Table {table} has no cell ({row!r}, {column!r}); rows: "
                       f"{list(frame.index)}, columns: {list(frame.columns)}")
    check_setting(table, row, paper, setting)
    return float(frame.loc[row, column])


def average_mismatches(table: int | str, paper: str, average: str = "Avg.") -> list[str]:
    """One line per row whose printed average is not the mean of its printed cells (beyond the rounding of the
    cells, 0.01): the printed value and the recomputed one, so a reader compares ours with either."""
    frame = paper_table(table, paper).apply(pd.to_numeric, errors="coerce")
    cells = frame.drop(columns=[average])
    lines = []
    for row, printed in frame[average].items():
        recomputed = cells.loc[row].mean()
        if pd.notna(printed) and cells.loc[row].notna().all() and abs(recomputed - printed) > 0.01 + 1e-9:
            lines.append(f"{PAPERS[paper_key(paper)]} Table {table}, {row}: the paper prints {average} "
                         f"{printed:.2f}; its cells average to {recomputed:.2f}")
    return lines


def paper_title(table: int | str, paper: str = "diffcse") -> str:
    spec = paper_tables(paper)[str(table)]
    return f"{PAPERS[paper_key(paper)]} Table {table}: {spec['title']} ({spec['metric']})"


def paper_figure(figure: int | str, paper: str = "diffcse") -> dict:
    """What a paper says of one figure: title, its plotted points where the text gives them, what it states (e.g.
    DiffAug Figure 5's best stage-1 length), notes."""
    figures = paper_spec(paper).get("figures", {})
    if str(figure) not in figures:
        raise KeyError(f"{PAPERS[paper_key(paper)]} Figure {figure} is not in {VALUES_DIR / (paper_key(paper) + '.json')}"
                       f"; figures: {', '.join(figures)}")
    return figures[str(figure)]


def paper_examples(table: int | str, paper: str = "diffcse") -> dict:
    """Non-numeric tables (DiffCSE Table 9: queries and the sentences each model retrieved)."""
    return paper_spec(paper)["examples"][str(table)]


def artefacts(paper: str) -> list[dict]:
    """Every table and figure of the paper in its order: {"id", "kind", "title", "data"} (data=False: schematic)."""
    return paper_spec(paper).get("artefacts", [])
