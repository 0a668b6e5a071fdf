"""The methods the kit trains, by name: its own and a researcher's (`@register("name")` on an objective class
defined anywhere). A method of one's own is found by every process the kit starts through the modules named in
$CSE_KIT_PLUGINS (comma-separated import paths or .py files) and those installed under the entry-point group
`cse_kit.methods`; its source is part of its runs' keys (`method_source`), so editing it recomputes its runs only."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import linecache
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from .errors import MethodError
from .objective import Objective

PLUGINS_ENV = "CSE_KIT_PLUGINS"
ENTRY_POINT_GROUP = "cse_kit.methods"
#: name -> objective class; filled by @register (the kit's own methods register as they are imported)
METHODS: dict[str, type] = {}
_loaded: set[str] = set()  # the plugin modules this process has imported


class PluginError(MethodError):
    """A plugin that raised while it was imported, named (`plugin`: its file, module or entry point); what it raised
    is the __cause__, whose traceback `cse-kit --debug` shows."""

    def __init__(self, plugin: str, error: Exception):
        self.plugin = plugin
        super().__init__(f"{plugin} failed to import: {type(error).__name__}: {error}")


def register(name: str):
    """Class decorator: train `cls`, a subclass of Objective, as `--set method=name`. Registering a name again from the same place (a notebook
    cell run twice, a module reloaded) replaces it; from another place is refused."""
    if not isinstance(name, str) or not name or any(c in name for c in " =,."):
        raise MethodError(f"a method's name is a non-empty word without spaces, '=', ',' or '.'; got {name!r}")

    def add(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Objective)):
            raise MethodError(f"{getattr(cls, '__qualname__', cls)} is no cse_kit.methods.Objective, so it has no "
                              "from_config(cfg, tokenizer, encoder) nor the hooks the training loop calls: subclass "
                              "Objective")
        old = METHODS.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise MethodError(f"method {name!r} is already {old.__module__}.{old.__qualname__}; register "
                              f"{cls.__module__}.{cls.__qualname__} under another name")
        cls.method = name
        METHODS[name] = cls
        return cls
    return add


def plugin_names() -> list[str]:
    """The modules $CSE_KIT_PLUGINS names, in order."""
    return [part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(",") if part.strip()]


def import_plugin(name: str) -> None:
    """Import one plugin: a .py file's path, or an import path (looked up on sys.path, then the current folder, which
    a console script such as `cse-kit` leaves off sys.path)."""
    if name in _loaded:
        return
    if name.endswith(".py"):
        _import_file(name)
    else:
        _import_module(name)
    _loaded.add(name)


def _import_file(name: str) -> None:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise MethodError(f"{PLUGINS_ENV} names {name}, which is not a file: give the path of the module that "
                          "registers your method, or its import path")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise PluginError(f"plugin {path}", error) from error


def _import_module(name: str) -> None:
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name not in (name, name.split(".")[0]):  # a package the plugin imports is missing
            raise PluginError(f"plugin module {name!r}", error) from error
        raise MethodError(f"{PLUGINS_ENV} names module {name!r}, which is not importable from here: install it, "
                          "add its folder to PYTHONPATH, or give its .py file's path") from None
    except Exception as error:
        raise PluginError(f"plugin module {name!r}", error) from error


def load_plugins() -> None:
    """Import every module of $CSE_KIT_PLUGINS and of the `cse_kit.methods` entry points (each once a process)."""
    for name in plugin_names():
        import_plugin(name)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.value not in _loaded:
            try:
                point.load()
            except Exception as error:
                raise PluginError(_entry_point_name(point), error) from error
            _loaded.add(point.value)


def _entry_point_name(point) -> str:
    """An entry point as its distribution declares it, e.g. `plugin mine = mypkg.loss (entry point of mypkg 1.0,
    group cse_kit.methods)`."""
    dist = f"{point.dist.name} {point.dist.version}" if point.dist else "an unnamed distribution"
    return f"plugin {point.name} = {point.value} (entry point of {dist}, group {ENTRY_POINT_GROUP})"


def use_plugins(*names: str) -> None:
    """Import plugins here (a notebook's `plugin` parameter) and name them in $CSE_KIT_PLUGINS, so every process this
    one starts (report workers, cluster jobs, `accelerate launch` ranks) imports them too."""
    for name in names:
        import_plugin(name)
    os.environ[PLUGINS_ENV] = ",".join(dict.fromkeys([*plugin_names(), *names]))


def method_class(name: str) -> type:
    """The objective class registered as `name` (plugins are imported when the name is not known yet)."""
    if name not in METHODS:
        load_plugins()
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)} (a method of your own: "
                          f"@cse_kit.methods.register({name!r}) on its class, in a module named in ${PLUGINS_ENV}: "
                          "docs/extending.md)")
    return METHODS[name]


def is_kit_method(cls: type) -> bool:
    """Whether cls is one of the kit's own methods (its code is in every key already: results.code_version)."""
    return cls.__module__.split(".")[0] == "cse_kit"


def defined_in_notebook(cls: type) -> bool:
    """A class defined in a notebook cell or an interactive session: no other process can import it."""
    return cls.__module__ == "__main__"


def _cell_sources(cls: type) -> list[str]:
    """The source of the cells (or files) that define cls's functions, through linecache (IPython keeps each cell
    there under a file name of its own)."""
    files = sorted({member.__code__.co_filename for member in vars(cls).values()
                    if inspect.isfunction(member)})
    return ["".join(linecache.getlines(name)) for name in files]


def method_source(cls: type) -> str:
    """The source that defines a researcher's method: its module's file, or for a class defined in a notebook cell
    that cell's source. Refused where it cannot be read, since a run's key needs it."""
    if defined_in_notebook(cls):
        sources = _cell_sources(cls)
    else:
        try:
            sources = [inspect.getsource(sys.modules[cls.__module__])]
        except (OSError, TypeError, KeyError):
            sources = []
    if not sources or not all(sources):
        raise MethodError(f"the source of method {getattr(cls, 'method', cls.__qualname__)!r} "
                          f"({cls.__module__}.{cls.__qualname__}) cannot be read, and a run's key needs it (so that "
                          "editing the method recomputes its runs): define it in a .py module or a notebook cell, "
                          "not through exec() or a compiled file")
    return "\n".join(sources)


def method_digest(cls: type) -> str | None:
    """sha256 of a researcher's method's source (None for the kit's own methods)."""
    if is_kit_method(cls):
        return None
    return hashlib.sha256(method_source(cls).encode()).hexdigest()[:16]


def plugins_digest() -> str:
    """sha256 over the sources of every method of one's own registered here (after the plugins are imported): what
    a notebook's tables depend on beside the kit's code (cse_kit.report.execution_key)."""
    load_plugins()
    digest = hashlib.sha256()
    for name in sorted(METHODS):
        if (source := method_digest(METHODS[name])) is not None:
            digest.update(f"{name} {source}\n".encode())
    return digest.hexdigest()[:16]


def check_sendable(name: str) -> None:
    """Refuse to hand a run of a notebook-cell method to another process (a report worker, a SLURM job)."""
    cls = method_class(name)
    if defined_in_notebook(cls):
        raise MethodError(f"method {name!r} is defined in this notebook, so another process (a worker, a cluster "
                          f"job) cannot train it: move the class into a module (e.g. mymethod.py) and name it in "
                          f"${PLUGINS_ENV}=mymethod.py")
