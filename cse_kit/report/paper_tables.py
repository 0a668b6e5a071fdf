"""`cse-kit report --latex DIR` / `--markdown DIR`: every table the report shows, one .tex (booktabs) and one .md per
table (experiments/typeset.py), from the tables the notebooks last saved in the results store, the ones
`cse-kit status` reads: nothing is executed, trained or evaluated."""

from __future__ import annotations

from pathlib import Path

from ..experiments import resolve_profile
from ..experiments.typeset import output_folder, write_tables
from ..results import default_results_dir
from .coverage_matrix import saved_profiles, saved_tables


def profile_of_store(results_dir, profile: str) -> str:
    """The profile whose tables are written: the one asked for, or for `auto` the one profile the store holds tables
    of (auto's own choice depends on this machine, not on what the store holds)."""
    if profile != "auto":
        return resolve_profile(profile)
    saved = saved_profiles(results_dir)
    if len(saved) > 1:
        raise ValueError(f"the results store holds tables of several profiles ({', '.join(saved)}): choose one with "
                         "--profile")
    if not saved:
        raise ValueError(f"no saved tables in {_tables_dir(results_dir)}: run `cse-kit report` (or a notebook) first")
    return saved[0]


def write_report_tables(results_dir, profile: str, names: list[str], latex_dir=None,
                        markdown_dir=None) -> list[Path]:
    """Write the saved tables of `names` (the report's notebooks, in its order) on `profile` as LaTeX into
    latex_dir and as Markdown into markdown_dir (either may be None; both may be one folder). Both folders are
    checked before anything is written. Returns the paths written."""
    folders = [output_folder(folder) if folder else None for folder in (latex_dir, markdown_dir)]
    tables = saved_tables(results_dir, profile)
    shown = [tables[name] for name in names if name in tables]
    if not shown:
        raise ValueError(f"no saved tables of the {profile} profile in {_tables_dir(results_dir)} for these "
                         f"notebooks: run `cse-kit report --profile {profile}` first")
    paths = []
    for table in shown:
        paths += write_tables(table, folders[0], latex=True, markdown=False) if folders[0] else []
        paths += write_tables(table, folders[1], latex=False, markdown=True) if folders[1] else []
    return paths


def _tables_dir(results_dir) -> Path:
    return (Path(results_dir) if results_dir else default_results_dir()) / "tables"
