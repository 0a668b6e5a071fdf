"""The versions the kit declares are the ones it was tried on (issue 80): pyproject.toml's lower bounds are
constraints-min.txt's pins, the minimum set bench/versions.sh builds; cse_kit/tested_versions.json (what the doctor
names a library outside of) holds that set and the newest tried; CI's pins, the README's torch and environment.yml
lie inside it."""

import json
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from cse_kit.doctor import TESTED_VERSIONS

ROOT = Path(__file__).resolve().parent.parent


def pins(path: Path) -> dict[str, str]:
    """{package: version} of a constraints file's `name==version` lines."""
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return dict(line.split("==") for line in lines if "==" in line)


def declared() -> dict[str, Requirement]:
    """pyproject.toml's requirements, the extras' included, by name."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {req.name.lower().replace("_", "-"): req for req in map(Requirement, texts) if not req.name == "cse-kit"}


def lower_bound(requirement: Requirement) -> str:
    [bound] = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    return bound


def test_each_declared_floor_is_the_minimum_set_that_was_tried():
    minimum, requirements = pins(ROOT / "constraints-min.txt"), declared()
    tested = json.loads(TESTED_VERSIONS.read_text())
    assert tested["min"] == minimum
    for name, version in minimum.items():
        floor = Version(lower_bound(requirements[name.lower().replace("_", "-")]))
        # the floor names the release the pin is of (torch>=2.7: torch==2.7.0; numpy>=1.26: numpy==1.26.4)
        assert Version(version).release[:len(floor.release)] == floor.release, (name, str(floor), version)


def test_what_ci_the_readme_and_conda_install_lies_in_the_tested_range():
    tested = json.loads(TESTED_VERSIONS.read_text())
    ci = pins(ROOT / "constraints-cpu.txt")
    readme_torch = re.search(r"pip install --no-deps torch==([\d.]+)", (ROOT / "README.md").read_text()).group(1)
    for name, version in [*((n, v) for n, v in ci.items() if n in tested["min"]), ("torch", readme_torch)]:
        assert Version(tested["min"][name]) <= Version(version) <= Version(tested["newest"][name]), (name, version)
    conda = (ROOT / "environment.yml").read_text()
    python = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"python>={python}" in conda and f"pytorch-cpu>={lower_bound(declared()['torch'])}" in conda
