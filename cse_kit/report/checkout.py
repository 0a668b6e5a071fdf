"""The checkout the kit runs from: the repository folder beside the package and its notebooks. An editable install
(`pip install -e .`) runs its own checkout's notebooks, whatever folder a command is typed in; a plain `pip install .`
copies the package alone, without them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"


def check_notebooks() -> None:
    """Refuse, in one line, an install without the notebooks (a plain, non-editable `pip install .`)."""
    if not NOTEBOOK_DIR.is_dir():
        raise FileNotFoundError(f"cse-kit report executes the notebooks of a clone of the repository, and this "
                                f"cse-kit ({Path(__file__).parents[1]}) is installed without them: clone the repository "
                                "and run `pip install -e .` in it, then `cse-kit report` there")
