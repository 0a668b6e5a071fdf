"""What the repository itself holds: source, never what a run wrote."""

import re
import shutil
import subprocess

import pytest

from conftest import REPO

#: folders a run writes into: the results store (`reports/results`, a `--results-dir` such as `results0`) and training
#: output (`runs/`); the package's own `cse_kit/results/` is the store's code
RUN_FOLDER = re.compile(r"results\d*|runs")
PACKAGE = "cse_kit/"


def test_git_tracks_nothing_a_run_wrote():
    """A results store's lock (`results0/locks/<key>.lock`, left by a notebook that resolved a relative results
    directory in notebooks/) was committed once."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    written = [path for path in tracked.splitlines() if path.endswith(".lock") or not path.startswith(PACKAGE)
               and any(RUN_FOLDER.fullmatch(folder) for folder in path.split("/")[:-1])]
    assert not written, f"run output tracked by git (git rm it): {written}"
