"""`cse-kit report`: execute (or reuse) every table notebook with papermill and build one self-contained page,
reports/index.html: every table (paper vs reproduced, coloured difference, seeds, profile), the figures, the
environment, and the executed notebooks. No script, style, font or image is fetched from anywhere."""

from __future__ import annotations

import hashlib
import html
import json
import os
import time
from functools import lru_cache
from pathlib import Path

import pandas as pd

from .experiments import TABLE_MIMETYPE, resolve_profile, style
from .io import write_json_atomic, write_text_atomic
from .papers import all_notebooks
from .results import source_digest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
#: Every paper's notebooks, in the report's order (papers, then each paper's own order).
NOTEBOOKS = tuple(all_notebooks())
#: Set for every kernel: no progress bars stored in notebooks, no tokenizer fork warnings.
KERNEL_ENV = {"TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}


@lru_cache(maxsize=1)
def _package_version() -> str:
    return source_digest()


def execution_key(notebook: Path, params: dict) -> str:
    """What an executed notebook depends on: its source, its parameters and the package's code."""
    digest = hashlib.sha256(notebook.read_bytes())
    digest.update(json.dumps(params, sort_keys=True).encode())
    digest.update(_package_version().encode())
    return digest.hexdigest()[:16]


def execute(name: str, params: dict, executed_dir: Path, force: bool = False) -> dict:
    """Run notebooks/<name>.ipynb with papermill into executed_dir/<name>__<key>.ipynb unless that finished run
    exists. Returns {"name", "path", "status": ok|failed|reused, "seconds", "error"}."""
    import nbformat
    import papermill

    source = NOTEBOOK_DIR / f"{name}.ipynb"
    out = executed_dir / f"{name}__{execution_key(source, params)}.ipynb"
    if out.is_file() and not force and not _failed(nbformat.read(out, as_version=4)):
        return {"name": name, "path": out, "status": "reused", "seconds": 0.0, "error": ""}
    executed_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".running.ipynb")
    start = time.perf_counter()
    os.environ.update(KERNEL_ENV)
    error = ""
    try:
        papermill.execute_notebook(str(source), str(tmp), parameters=params, cwd=str(NOTEBOOK_DIR),
                                   kernel_name="python3", progress_bar=False)
    except papermill.PapermillExecutionError as err:
        error = f"{err.ename}: {err.evalue}"
    tmp.replace(out)  # failed runs are kept too (papermill marks them), so the report can show the error
    return {"name": name, "path": out, "status": "failed" if error else "ok",
            "seconds": time.perf_counter() - start, "error": error}


def _failed(nb) -> bool:
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
            cell.outputs = [o for o in cell.get("outputs", []) if TABLE_MIMETYPE not in o.get("data", {})]
    body, _ = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                           exclude_output_prompt=True).from_notebook_node(nb)
    return body


def table_html(table: dict, uid: str) -> str:
    parts = [f"<h2 id='{uid}'>{html.escape(table['title'])}</h2>",
             f"<p class='meta'>profile <b>{html.escape(table['profile'])}</b>: {html.escape(table['profile_note'])}"
             f" &middot; seeds {html.escape(str(table['seeds']))}</p>"]
    if table["comparison"]:
        frame = pd.DataFrame(table["comparison"])
        digits = 3 if frame["paper"].abs().max() < 10 else 2
        parts.append(style(frame, "paper vs reproduced (mean ± std over seeds; Δ = reproduced − paper)",
                           digits=digits).set_uuid(uid).to_html())
    for note in table["notes"]:
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    examples = table.get("extra", {}).get("examples")
    if examples:
        parts.append(pd.DataFrame(examples).to_html(index=False, classes="examples", border=0))
    parts += [f"<img alt='{html.escape(table['title'])}' src='{src}'>" for src in table["figures"]]
    return "\n".join(parts)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cse-kit report ({profile})</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #1f2328; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: 3px 8px; text-align: left; }}
caption {{ text-align: left; font-style: italic; padding-bottom: 4px; }}
img {{ max-width: 100%; display: block; margin: 0.5em 0; }}
.meta, .note {{ color: #57606a; font-size: 13px; }} .failed {{ color: #cf222e; }}
details {{ margin: 0.3em 0; }} summary {{ cursor: pointer; }}
nav a {{ margin-right: 1em; }}
</style></head><body>
<h1>cse-kit: DiffCSE reproduced ({profile} profile)</h1>
<p class="meta">{profile_note}. Built {built}; {n_ok} of {n} notebooks ran; green Δ within 1 point of the paper.</p>
<nav>{nav}</nav>
{sections}
<h2 id="environment">Environment</h2>
<pre>{environment}</pre>
<h2>Executed notebooks</h2>
{appendix}
</body></html>
"""


def build(profile: str = "auto", results_dir=None, data_dir=None, out_dir=None, force: bool = False,
          only: list[str] | None = None, log=print) -> Path:
    """Execute or reuse each notebook, then write out_dir/index.html. Returns its path."""
    import nbformat

    from .experiments import PROFILE_NOTES

    profile = resolve_profile(profile)
    out_dir = Path(out_dir) if out_dir else ROOT / "reports"
    names = list(only or NOTEBOOKS)
    unknown = [n for n in names if n not in NOTEBOOKS]
    if unknown:
        raise ValueError(f"unknown notebook(s) {unknown}; choose from {', '.join(NOTEBOOKS)}")
    params = {"profile": profile, "results_dir": str(results_dir or ""), "data_dir": str(data_dir or "")}
    runs = []
    for name in names:
        run = execute(name, params, out_dir / "executed", force)
        log(f"{name}: {run['status']} ({run['seconds']:.0f} s){' ' + run['error'] if run['error'] else ''}")
        runs.append(run)
    sections, appendix, nav, environment = [], [], [], None
    for run in runs:
        nb = nbformat.read(run["path"], as_version=4)
        table = table_of(nb)
        nav.append(f"<a href='#{run['name']}'>{run['name']}</a>")
        if run["status"] == "failed" or _failed(nb) or table is None:
            sections.append(f"<h2 id='{run['name']}' class='failed'>{run['name']}: failed</h2>"
                            f"<p class='failed'>{html.escape(run['error'] or 'the notebook produced no table')}; "
                            f"see {html.escape(run['path'].name)}</p>")
        else:
            sections.append(table_html(table, run["name"]))
            environment = environment or table["environment"]
        appendix.append(f"<details><summary>{run['name']} ({run['path'].name})</summary>{notebook_html(nb)}"
                        "</details>")
    page = PAGE.format(profile=profile, profile_note=html.escape(PROFILE_NOTES[profile]),
                       built=time.strftime("%Y-%m-%d %H:%M"), n_ok=sum(r["status"] != "failed" for r in runs),
                       n=len(runs), nav="".join(nav), sections="\n".join(sections),
                       environment=html.escape(json.dumps(environment or {}, indent=1)), appendix="\n".join(appendix))
    index = write_text_atomic(out_dir / "index.html", page)
    write_json_atomic(out_dir / "report.json", {"profile": profile, "runs": [
        {**r, "path": str(r["path"])} for r in runs]})
    return index
