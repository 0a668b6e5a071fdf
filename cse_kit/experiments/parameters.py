"""A notebook's parameters, checked before any training: check_parameters refuses a misspelt papermill parameter
and reads a list given as text; check and sweep are the checks a notebook's first cells make. Each refusal is a
ParameterError."""

from __future__ import annotations


class ParameterError(ValueError):
    """A notebook parameter that cannot run; raised in the first cell, before any training."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ParameterError(message)


def sweep(values: list, single, name: str) -> list:
    """The swept values, or only `single` when it is set (papermill `-p lam 0.005`)."""
    chosen = list(values) if single is None else [single]
    check(len(chosen) > 0, f"no {name} values to run: give a non-empty list or a single value")
    return chosen


def _assigned(source: str) -> dict[str, str | None]:
    """The names a cell assigns at its top level -> their annotation's name (`lams: list = ...` -> "list"; None
    when not annotated)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node.annotation.id if isinstance(node.annotation, ast.Name) else None
    return names


def as_list(name: str, value):
    """papermill's `-p seeds [1,2]` injects the text "[1,2]" (only -y parses YAML): a list parameter given as text is
    read as YAML, so both spellings work; text that is not a list is refused with the spelling that is."""
    import yaml

    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = None
    check(isinstance(parsed, list), f"notebook parameter {name} is a list, got the text {value!r}; pass it as "
                                    f"-p {name} '[a, b]' or -y '{name}: [a, b]'")
    return parsed


def check_parameters() -> None:
    """A notebook's first call, before it reads its parameters. papermill injects every `-p name value` as a cell
    right after the tagged `parameters` cell, whatever the name, so a misspelt one (`-p lamda 0.1`) would leave the
    default sweep to run. The kernel's input history holds both cells: a name the injected cell sets that the
    parameters cell does not declare is refused. A list parameter injected as text is parsed (as_list)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    cells = list(shell.user_ns.get("In", [])) if shell is not None else []
    injected = [i for i, cell in enumerate(cells) if i > 0 and cell.lstrip().startswith("# Parameters")]
    if not injected:
        return
    declared, given = _assigned(cells[injected[-1] - 1]), _assigned(cells[injected[-1]])
    unknown = sorted(set(given) - set(declared))
    check(not unknown, f"unknown notebook parameter(s) {unknown}; this notebook takes: {', '.join(sorted(declared))} "
                       "(`papermill --help-notebook NOTEBOOK` lists them with their help)")
    for name in given:
        if declared[name] == "list":
            shell.user_ns[name] = as_list(name, shell.user_ns.get(name))
