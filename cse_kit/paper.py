"""The papers' published numbers, as data (cse_kit/paper_values.json, transcribed from papers.md §5), each with
the table, row and column it comes from."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pandas as pd

VALUES_FILE = Path(__file__).with_name("paper_values.json")


@lru_cache(maxsize=1)
def _values() -> dict:
    return json.loads(VALUES_FILE.read_text(encoding="utf-8"))


def paper_tables(paper: str = "DiffCSE") -> dict:
    try:
        return _values()[paper]["tables"]
    except KeyError:
        raise KeyError(f"no published numbers for paper {paper!r}; known: {', '.join(_values())}") from None


def paper_table(table: int | str, paper: str = "DiffCSE") -> pd.DataFrame:
    """One table as a DataFrame: the paper's row labels as index, its column labels as columns."""
    tables = paper_tables(paper)
    if str(table) not in tables:
        raise KeyError(f"{paper} Table {table} holds no numbers in paper_values.json; tables: {', '.join(tables)}")
    spec = tables[str(table)]
    return pd.DataFrame.from_dict(spec["rows"], orient="index", columns=spec["columns"])


def paper_value(table: int | str, row: str, column: str, paper: str = "DiffCSE") -> float:
    frame = paper_table(table, paper)
    if row not in frame.index or column not in frame.columns:
        raise KeyError(f"{paper} Table {table} has no cell ({row!r}, {column!r}); rows: {list(frame.index)}, "
                       f"columns: {list(frame.columns)}")
    return float(frame.loc[row, column])


def paper_title(table: int | str, paper: str = "DiffCSE") -> str:
    spec = paper_tables(paper)[str(table)]
    return f"{paper} Table {table}: {spec['title']} ({spec['metric']})"


def paper_examples(table: int | str, paper: str = "DiffCSE") -> dict:
    """Non-numeric tables (DiffCSE Table 9: queries and the sentences each model retrieved)."""
    return _values()[paper]["examples"][str(table)]
