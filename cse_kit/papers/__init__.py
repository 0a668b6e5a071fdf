"""One module per paper: which run stands behind each row of its tables, its notebooks' parameter checks and
table-specific columns, and `NOTEBOOKS` (notebook -> the artefacts it reproduces). The published numbers are data
(`values/<paper>.json`, read through `cse_kit.data.published`). The shared machinery (experiments, results, report) knows
no paper; it asks this package."""

from __future__ import annotations

import importlib

from ..data.published import PAPERS, paper_key

__all__ = ["PAPERS", "paper_key", "paper_module", "notebooks", "all_notebooks"]

def paper_module(paper: str):
    """cse_kit.papers.<paper>, or None while the paper has no module (nothing of it implemented yet)."""
    try:
        return importlib.import_module(f"{__name__}.{paper_key(paper)}")
    except ModuleNotFoundError as err:
        if err.name == f"{__name__}.{paper_key(paper)}":
            return None
        raise


def notebooks(paper: str) -> dict[str, list[str]]:
    """notebook name -> the artefact ids (e.g. "Table 1") it reproduces, in the paper's order."""
    module = paper_module(paper)
    return dict(getattr(module, "NOTEBOOKS", {})) if module else {}


def all_notebooks() -> dict[str, str]:
    """Every notebook of every paper -> its paper key, in report order."""
    return {name: key for key in PAPERS for name in notebooks(key)}
