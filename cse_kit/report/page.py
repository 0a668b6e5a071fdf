"""The report's page: build() executes (or reuses) the selected notebooks and writes one self-contained
reports/index.html (the coverage matrix, one section per paper with each table in its paper's layout, the environment,
the executed notebooks), with the machine's paths replaced by their names so the page can be shared."""

from __future__ import annotations

import html
import json
import os
import re
import time
from pathlib import Path

import pandas as pd

from ..data import resolve_data_dir
from ..data.published import paper_spec
from ..experiments import PROFILE_SCOPES, chosen_profile
from ..experiments.paper_vs_ours import comparison_frame
from ..experiments.render import long_form_html, paper_layout_html, values_html
from ..experiments.typeset import extra_frames
from ..io import WriteFailed, write_json_atomic, write_text_atomic
from ..papers import PAPERS, all_notebooks, paper_key
from ..papers.comparison import TITLE as COMPARISON_TITLE
from ..results import default_results_dir
from .checkout import NOTEBOOK_DIR, ROOT, check_notebooks
from .coverage_matrix import APART, coverage, coverage_html, tally_text
from .notebooks import NOTEBOOKS, ended_in_error, notebook_html, table_of
from .scheduling import default_jobs, execute_all


def table_html(table: dict, uid: str) -> str:
    """One notebook's section: the comparison in the paper's layout (long form collapsed), notes, extra tables,
    examples and figures."""
    parts = [f"<h3 id='{uid}'>{html.escape(table['title'])}</h3>",
             f"<p class='meta'>profile <b>{html.escape(table['profile'])}</b>: {html.escape(table['profile_note'])}"
             f" &middot; seeds {html.escape(str(table['seeds']))}</p>"]
    if table["comparison"]:
        frame = comparison_frame(table["comparison"])
        parts.append(paper_layout_html(frame, "paper vs reproduced"))
        parts.append(f"<details><summary>long form (every row × column)</summary>{long_form_html(frame)}</details>")
    for note in table["notes"]:
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    for caption, frame in extra_frames(table):
        parts.append(f"{values_html(frame)}<p class='meta'>{html.escape(caption)}</p>")
    examples = table.get("extra", {}).get("examples")
    if examples:
        parts.append(values_html(pd.DataFrame(examples)))
    parts += [f"<img alt='{html.escape(table['title'])}' src='{src}'>" for src in table["figures"]]
    return "\n".join(parts)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cse-kit report ({profile})</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1320px; padding: 0 1em; color: #1f2328; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }}
caption {{ text-align: left; font-style: italic; padding-bottom: 4px; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
img {{ max-width: 100%; display: block; margin: 0.5em 0; }}
.meta, .note {{ color: #57606a; font-size: 13px; }} .failed {{ color: #cf222e; }}
.paper {{ color: #57606a; }} .notrun {{ color: #9a6700; }}
table.paper-layout th.rowlabel {{ min-width: 10em; max-width: 16em; }}
table.paper-layout td {{ white-space: nowrap; padding: 3px 6px; }}
tr.ok td.status {{ color: #1a7f37; font-weight: bold; }} tr.info td.status {{ color: #0969da; }} tr.warn td.status {{ color: #9a6700; font-weight: bold; }}
tr.bad td.status {{ color: #cf222e; font-weight: bold; }} tr.todo td.status {{ color: #8250df; }}
tr.muted td {{ color: #8c959f; }}
details {{ margin: 0.3em 0; }} summary {{ cursor: pointer; }}
nav {{ display: flex; flex-wrap: wrap; gap: 0.3em 1em; font-size: 14px; }}
nav.toc {{ margin-bottom: 1em; }}
</style></head><body>
<h1>cse-kit report, {profile} profile</h1>
<p class="meta"><b>{tally}</b></p>
<p class="meta">{profile_note}. Built {built}; {n_ok} of {n} notebooks ran.</p>
<nav><a href="#coverage">coverage</a>{paper_links}<a href="#environment">environment</a></nav>
<h2 id="coverage">Coverage: every table and figure of the four papers</h2>
{coverage}
{sections}
<h2 id="environment">Environment</h2>
<pre>{environment}</pre>
<h2>Executed notebooks</h2>
{appendix}
</body></html>
"""


def select(papers: list[str] | None = None, only: list[str] | None = None) -> list[str]:
    """The notebooks a build runs: those of `papers` (all when None), narrowed to `only`."""
    keys = [paper_key(p) for p in papers] if papers else list(PAPERS)
    names = [name for name, key in all_notebooks().items() if key in keys]
    names += list(APART) if not papers else []  # after the papers: they reuse their runs
    if only:
        unknown = [n for n in only if n not in NOTEBOOKS]
        if unknown:
            raise ValueError(f"unknown notebook(s) {unknown}; choose from {', '.join(NOTEBOOKS)}")
        names = [n for n in names if n in only]
    return names


def section_of(name: str) -> str:
    """The page section a notebook's table goes to: its paper's key, or "comparison" (the head-to-head)."""
    return all_notebooks().get(name, "comparison")


def sections_html(names: list[str], sections: dict[str, list[str]], shown_papers: list[str]) -> str:
    """One section per paper (its heading, a table of contents of its notebooks in this build, its tables), then the
    head-to-head's section when it was built."""
    parts = []
    for key in shown_papers:
        toc = "".join(f"<a href='#{name}'>{name}</a>" for name in names if section_of(name) == key)
        body = "\n".join(sections.get(key, [])) or "<p class='note'>no notebook of this paper in this build</p>"
        title = paper_spec(key).get("title", "")
        heading = title if title.startswith(PAPERS[key]) else f"{PAPERS[key]}: {title}"
        parts.append(f"<h2 id='paper-{key}'>{html.escape(heading)}</h2><nav class='toc'>{toc}</nav>{body}")
    if "comparison" in sections:
        parts.append(f"<h2 id='paper-comparison'>{html.escape(COMPARISON_TITLE)}</h2>"
                     + "\n".join(sections["comparison"]))
    return "\n".join(parts)


def _evidence_href(profile: str, out_dir: Path) -> str | None:
    """The profile's scope evidence as a link relative to the page."""
    return os.path.relpath(ROOT / PROFILE_SCOPES[profile][1], out_dir) if profile in PROFILE_SCOPES else None


def machine_paths(results_dir: Path, data_dir: Path) -> dict[str, str]:
    """The machine's paths a shared page names instead: the results store, the data, the kit, Python's packages and
    the home directory (a training header names its output folder; a warning, its source file)."""
    import sysconfig

    paths = {results_dir: "<results-dir>", data_dir: "<data-dir>", ROOT: "<cse-kit>",
             Path(sysconfig.get_paths()["purelib"]): "<site-packages>", Path.home(): "~"}
    resolved = {Path(path).resolve(): name for path, name in paths.items()}
    return {str(path): name for path, name in resolved.items() if len(path.parts) > 1}  # never the root itself


def without_machine_paths(text: str, paths: dict[str, str]) -> str:
    """text with each machine path (longest first, so the results store inside the kit keeps its own name) replaced
    by its name; only whole paths: `/data` inside a URL or a longer path is left alone."""
    for path in sorted(paths, key=len, reverse=True):
        text = re.sub(rf"(?<![\w./:-]){re.escape(path)}(?![\w.-])", lambda _: paths[path], text)
    return text


def where_text(out_dir: Path, results_dir: Path, data_dir: Path) -> list[str]:
    """The report's first lines: which notebooks it executes and where the page and the results go (an editable
    install runs its own checkout's notebooks, whatever folder the command is typed in)."""
    lines = [f"executing the notebooks in {NOTEBOOK_DIR}",
             f"page {out_dir / 'index.html'}, executed notebooks in {out_dir / 'executed'}",
             f"results store {results_dir}; data {data_dir}"]
    here = Path.cwd().resolve()
    if here != ROOT and (here / "notebooks").is_dir() and (here / "pyproject.toml").is_file():
        lines.append(f"(not the notebooks of {here}: the cse-kit installed is {ROOT}'s; run `pip install -e .` in "
                     f"{here} to use its own)")
    return lines


def build(profile: str = "auto", results_dir=None, data_dir=None, out_dir=None, force: bool = False,
          only: list[str] | None = None, log=print, papers: list[str] | None = None, jobs: int | None = None) -> Path:
    """Execute or reuse each selected notebook (`jobs` at once; default_jobs(profile) when None), then write
    out_dir/index.html: the coverage matrix of every paper, then one section per paper. Returns its path."""
    import nbformat

    from ..experiments import PROFILE_NOTES

    check_notebooks()
    profile = chosen_profile(profile, log)  # missing models: one line naming them, not a failure in every notebook
    out_dir = (Path(out_dir) if out_dir else ROOT / "reports").resolve()
    names = select(papers, only)
    for line in where_text(out_dir, Path(results_dir or default_results_dir()).resolve(),
                           resolve_data_dir(data_dir).resolve()):
        log(line)
    # absolute: the kernels run in notebooks/, where `--data-dir data` would name notebooks/data
    params = {"profile": profile, "results_dir": str(Path(results_dir).resolve()) if results_dir else "",
              "data_dir": str(Path(data_dir).resolve()) if data_dir else ""}
    runs = execute_all(names, params, out_dir / "executed", force, log, jobs or default_jobs(profile))
    tables, failures, appendix, environment = {}, {}, [], None
    sections: dict[str, list[str]] = {}
    for run in runs:
        nb = nbformat.read(run["path"], as_version=4)
        table = table_of(nb)
        key = section_of(run["name"])
        if run["status"] == "failed" or ended_in_error(nb) or table is None:
            failures[run["name"]] = run["error"] or "the notebook produced no table"
            sections.setdefault(key, []).append(
                f"<h3 id='{run['name']}' class='failed'>{run['name']}: failed</h3><p class='failed'>"
                f"{html.escape(failures[run['name']])}; see {html.escape(run['path'].name)}</p>")
        else:
            tables[run["name"]] = table
            sections.setdefault(key, []).append(table_html(table, run["name"]))
            environment = environment or table["environment"]
        appendix.append(f"<details><summary>{run['name']} ({run['path'].name})</summary>{notebook_html(nb)}"
                        "</details>")
    shown_papers = [paper_key(p) for p in papers] if papers else list(PAPERS)
    lines = coverage(tables, failures, shown_papers)
    page = PAGE.format(profile=profile, profile_note=html.escape(PROFILE_NOTES[profile]),
                       built=time.strftime("%Y-%m-%d %H:%M"), n_ok=sum(r["status"] != "failed" for r in runs),
                       n=len(runs), paper_links="".join(f"<a href='#paper-{k}'>{PAPERS[k]}</a>" for k in shown_papers)
                       + (f"<a href='#paper-comparison'>{COMPARISON_TITLE}</a>" if "comparison" in sections else ""),
                       tally=html.escape(tally_text(lines, profile)),
                       coverage=coverage_html(lines, profile, _evidence_href(profile, out_dir)),
                       sections=sections_html(names, sections, shown_papers),
                       environment=html.escape(json.dumps(environment or {}, indent=1)), appendix="\n".join(appendix))
    shared = {html.escape(path): html.escape(name) for path, name in machine_paths(
        Path(results_dir or default_results_dir()), resolve_data_dir(data_dir)).items()}
    index = write_text_atomic(out_dir / "index.html", without_machine_paths(page, shared))
    write_json_atomic(out_dir / "report.json", {"profile": profile, "coverage": lines, "runs": [
        {**r, "path": str(r["path"])} for r in runs]})
    for run in runs:  # a full disk: said as `cse-kit train` says it (free space, run again), once the page is written
        if failed := WriteFailed.said(run["error"]):
            raise failed
    return index
