"""The package's layers (docs/layout.md): every import of cse_kit/, at the top of a module or inside a function, runs
down the layers or stays in its own, no modules import each other in a circle, and the top of cse_kit/ holds the
layers and nothing else."""

import ast

from conftest import REPO

PACKAGE = REPO / "cse_kit"
#: the top of cse_kit/, layer by layer from the top down: a module may import its own layer and those below it
LAYERS = [("cli",), ("report", "doctor.py", "publish"), ("papers",), ("experiments", "tune"), ("results",), ("train",),
          ("methods",), ("eval",), ("models",), ("data",), ("io.py", "environment.py", "progress.py", "__init__.py")]
LAYER = {room: floor for floor, rooms in enumerate(LAYERS) for room in rooms}


def module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, package: str, known) -> set[str]:
    """The modules of `known` that source (a module of `package`) imports anywhere in it: `from .x import name` is
    module x, or x.name where that is a module."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            submodules = {f"{module}.{alias.name}" for alias in node.names} & set(known)
            found |= submodules or {module}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found & set(known)


def import_graph() -> dict[str, set[str]]:
    """cse_kit's module -> the kit's modules it imports."""
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported(path.read_text(), name if path.name == "__init__.py" else name.rpartition(".")[0],
                           files) - {name}
            for name, path in files.items()}


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    return LAYER[top] if top in LAYER else LAYER[f"{top}.py"]


def up_imports(edges: dict) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in edges.items() for b in targets if layer(b) < layer(a))


def circles(edges: dict) -> list[list[str]]:
    """Each loop of imports found by a depth-first walk (every module on a loop is on at least one found)."""
    found, done = [], set()

    def walk(path):
        for target in sorted(edges[path[-1]]):
            if target in path:
                found.append(path[path.index(target):] + [target])
            elif target not in done:
                walk(path + [target])
        done.add(path[-1])

    for module in sorted(edges):
        if module not in done:
            walk([module])
    return found


def test_the_top_of_the_package_is_its_layers():
    tops = {path.name for path in PACKAGE.iterdir() if path.suffix == ".py" or (path / "__init__.py").is_file()}
    assert tops == set(LAYER), ("a new top-level module goes into its layer's folder, a new layer into LAYERS and "
                                f"docs/layout.md: {sorted(tops ^ set(LAYER))}")


def test_no_import_runs_up_a_layer():
    assert not up_imports(import_graph()), "move the code down to where its users are, or hand it in from above"


def test_no_modules_import_each_other_in_a_circle():
    assert not circles(import_graph())


def test_an_import_up_a_layer_and_a_circle_are_seen_wherever_they_are_written():
    known = {"cse_kit.data", "cse_kit.data.loaders", "cse_kit.eval", "cse_kit.eval.encode", "cse_kit.io"}
    loaders = "import json\n\ndef f():\n    from ..eval.encode import pool\n    from .. import io\n"
    encode = "from ..data import loaders\nimport cse_kit.io\n"
    edges = {"cse_kit.data.loaders": imported(loaders, "cse_kit.data", known),
             "cse_kit.eval.encode": imported(encode, "cse_kit.eval", known), "cse_kit.io": set()}
    assert edges == {"cse_kit.data.loaders": {"cse_kit.eval.encode", "cse_kit.io"},
                     "cse_kit.eval.encode": {"cse_kit.data.loaders", "cse_kit.io"}, "cse_kit.io": set()}
    assert up_imports(edges) == ["cse_kit.data.loaders -> cse_kit.eval.encode"]
    assert circles(edges) == [["cse_kit.data.loaders", "cse_kit.eval.encode", "cse_kit.data.loaders"]]


def private_imports(source: str, module: str) -> list[str]:
    """`from M import _name` in `source` (module `module`) where M is a module of the kit (cse_kit, bench) outside the
    importing module's own package: a name a package keeps to itself, used from another."""
    package = module.rpartition(".")[0] if not module.endswith(".__init__") else module.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
        source_module = ".".join(base + ([node.module] if node.module else []))
        if source_module.split(".")[0] not in ("cse_kit", "bench") or \
                source_module == package or source_module.startswith(package + "."):
            continue
        found += [f"{module}: from {source_module} import {alias.name}" for alias in node.names
                  if alias.name.startswith("_") and not alias.name.endswith("__")]
    return found


def test_no_module_imports_another_packages_private_name():
    """What a package shares it names in public; a private name used from another package is a contract nobody
    wrote down (bench/ is a package of its own here, as each of cse_kit's)."""
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "bench").glob("*.py")]):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found += private_imports(path.read_text(), name)
    assert not found, "name it in public where it is defined, or move it to its user: " + "; ".join(found)


def test_a_private_name_from_another_package_is_seen():
    source = "from .checkpoint import _sha256\nfrom ..models import _packaged_copy\nfrom ..io import _x"
    assert private_imports(source, "cse_kit.train.loop") == [
        "cse_kit.train.loop: from cse_kit.models import _packaged_copy", "cse_kit.train.loop: from cse_kit.io import _x"]
    assert private_imports("from cse_kit.train.loop import _x, __version__\n", "bench.paper_speed") == [
        "bench.paper_speed: from cse_kit.train.loop import _x"]
