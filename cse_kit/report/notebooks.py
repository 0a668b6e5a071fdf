"""One notebook executed with papermill into the report's folder, or reused where that finished run exists (its
cache key: execution_key), its progress lines passed on to the console; what an executed notebook holds for the
report: the table it handed over (table_of), its warnings, its outputs as HTML."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from functools import lru_cache
from pathlib import Path

from traitlets.config import Config

from ..environment import source_digest, variables_set
from ..experiments import TABLE_MIMETYPE
from ..methods.registry import plugins_digest
from ..papers import all_notebooks
from ..progress import PROGRESS_PREFIX, TERMINAL_PROGRESS_ENV
from ..results import evaluation_amp
from .checkout import NOTEBOOK_DIR
from .coverage_matrix import APART


#: Every paper's notebooks, in the report's order (papers, then each paper's own order), then the notebooks of every
#: method (the head-to-head, the equal tuning budget), which reuse the papers' runs.
NOTEBOOKS = (*all_notebooks(), *APART)

#: Set for every kernel: no progress bars stored in notebooks, no tokenizer fork warnings, the progress lines only on
#: the notebook's stream (the console gets them from there, under the notebook's name).
KERNEL_ENV = {"TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false", TERMINAL_PROGRESS_ENV: "0"}


def kernel_config() -> Config:
    """How papermill starts a kernel. It talks to papermill over local sockets (IPC), not TCP: nothing crosses the
    network and ipykernel does not warn "Kernel is running over TCP without encryption" at every notebook. The sockets
    are `<ip>-<port>` files; jupyter's default `ip` is the relative "kernel-ipc", the same for every report run in the
    notebooks' folder, so two reports at once connected to each other's kernels. Each kernel gets its own folder.
    The kernel's own log stays off the console (it shares the report's stderr): jupyter_client interrupts every
    kernel it shuts down, and one still finishing its last reply logs "KeyboardInterrupt caught in kernel" at a
    finished notebook; a notebook's errors reach the page through its cells, a dead kernel through papermill."""
    import tempfile

    return Config({"KernelManager": {"transport": "ipc",
                                     "ip": str(Path(tempfile.mkdtemp(prefix="cse-kit-kernel-")) / "kernel")},
                   "NotebookClient": {"extra_arguments": ["--IPKernelApp.log_level=CRITICAL"]}})


@lru_cache(maxsize=1)
def _package_version() -> str:
    return source_digest()


def execution_key(notebook: Path, params: dict) -> str:
    """What an executed notebook depends on: its source, its parameters and the package's code."""
    digest = hashlib.sha256(notebook.read_bytes())
    digest.update(json.dumps(params, sort_keys=True).encode())
    digest.update(_package_version().encode())
    digest.update(plugins_digest().encode())  # a method of one's own that was edited: its rows are recomputed
    if evaluation_amp():  # its tables come from other records (cse_kit.results.evaluation_protocol)
        digest.update(b"evaluation under AMP")
    return digest.hexdigest()[:16]


class _ProgressLines:
    """A file for papermill's stderr_file: the notebook's progress lines (experiments.progress) to `log` as they come,
    each under the notebook's name; everything else on stderr stays in the executed notebook only."""

    def __init__(self, name: str, log):
        self.name, self.log, self.partial = name, log, ""

    def write(self, text: str) -> None:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            if line.startswith(PROGRESS_PREFIX):
                self.log(f"    {self.name}: {line.removeprefix(PROGRESS_PREFIX)}")

    def flush(self) -> None:
        pass


def execute(name: str, params: dict, executed_dir: Path, force: bool = False, log=None) -> dict:
    """Run notebooks/<name>.ipynb with papermill into executed_dir/<name>__<key>.ipynb unless that finished run
    exists, its progress lines to `log`. Returns {"name", "path", "status": ok|failed|reused, "seconds", "error"}."""
    import nbformat
    import papermill

    source = NOTEBOOK_DIR / f"{name}.ipynb"
    unknown = sorted(set(params) - set(papermill.inspect_notebook(str(source))))
    if unknown:
        raise ValueError(f"{name} has no parameter(s) {unknown}; it takes: "
                         f"{', '.join(papermill.inspect_notebook(str(source)))}")
    out = executed_dir / f"{name}__{execution_key(source, params)}.ipynb"
    for stale in executed_dir.glob(f"{name}__*.running.ipynb"):  # left by a killed report (SIGTERM, kill -9)
        stale.unlink(missing_ok=True)
    if out.is_file() and not force and not ended_in_error(nbformat.read(out, as_version=4)):
        return {"name": name, "path": out, "status": "reused", "seconds": 0.0, "error": ""}
    executed_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".running.ipynb")
    start = time.perf_counter()
    error = ""
    kernel = kernel_config()
    try:
        with variables_set(KERNEL_ENV):  # the kernel's, not the caller's for good
            papermill.execute_notebook(str(source), str(tmp), parameters=params, cwd=str(NOTEBOOK_DIR),
                                       kernel_name="python3", progress_bar=False, config=kernel,
                                       stderr_file=_ProgressLines(name, log) if log else None)
    except papermill.PapermillExecutionError as err:
        error = f"{err.ename}: {err.evalue}"
    finally:
        shutil.rmtree(Path(kernel.KernelManager.ip).parent, ignore_errors=True)
    tmp.replace(out)  # failed runs are kept too (papermill marks them), so the report can show the error
    return {"name": name, "path": out, "status": "failed" if error else "ok",
            "seconds": time.perf_counter() - start, "error": error}


def notebook_warnings(nb) -> list[str]:
    """The warnings an executed notebook raised ("UserWarning: 2 runs pending ..."), from its cells' stderr, once
    each: the report prints them, since a reader of the console never opens the executed notebook."""
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found += [m.group(1) for m in re.finditer(r"(\w*Warning: .*)", output.get("text", ""))]
    return list(dict.fromkeys(found))


def ended_in_error(nb) -> bool:
    """Whether papermill marked the executed notebook as stopped by an exception."""
    return bool(nb.metadata.get("papermill", {}).get("exception"))


def table_of(nb) -> dict | None:
    """The table a notebook handed to the report (its save_table output)."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if TABLE_MIMETYPE in output.get("data", {}):
                return output["data"][TABLE_MIMETYPE]
    return None


def notebook_html(nb) -> str:
    """The executed notebook's outputs (inputs hidden) as an HTML fragment, with nbconvert's basic template."""
    import copy

    from nbconvert import HTMLExporter

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in map(_without_progress, cell.get("outputs", []))
                            if TABLE_MIMETYPE not in o.get("data", {}) and o.get("text", True)]
    body, _ = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                           exclude_output_prompt=True).from_notebook_node(nb)
    return body


def _without_progress(output):
    """An output with the progress lines taken out of its stream text (the console had them; the page need not)."""
    if output.get("output_type") == "stream":
        output["text"] = "".join(line for line in output.get("text", "").splitlines(keepends=True)
                                 if not line.startswith(PROGRESS_PREFIX))
    return output
