"""`cse-kit report`: execute (or reuse) every paper's table notebooks with papermill and build one self-contained
page, reports/index.html: a coverage matrix of every table and figure of the four papers (reproduced, not run on
this profile, not implemented yet, schematic), then one section per paper with each table in its paper's layout
(paper, ours mean ± std, Δ), the figures, the environment, and the executed notebooks. No script, style, font or
image is fetched from anywhere."""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
import shutil
import signal
import time
from functools import lru_cache
from pathlib import Path

import pandas as pd
from traitlets.config import Config

from ..data import resolve_data_dir
from ..data.published import artefacts, paper_spec
from ..environment import source_digest, threads_per_worker
from ..experiments import PROFILE_SCOPES, TABLE_MIMETYPE, chosen_profile
from ..experiments.render import (long_form_html, not_run_reasons, ours_text, paper_layout_html, paper_text,
                                  values_html, within_tolerance)
from ..io import write_json_atomic, write_text_atomic
from ..methods.registry import plugins_digest
from ..papers import PAPERS, all_notebooks, paper_key, paper_module
from ..papers import notebooks as paper_notebooks
from ..papers.comparison import NOTEBOOK as COMPARISON_NOTEBOOK
from ..papers.comparison import TITLE as COMPARISON_TITLE
from ..progress import PROGRESS_PREFIX, TERMINAL_PROGRESS_ENV
from ..results import default_results_dir, evaluation_amp
from ..train.presets import PROFILES, sizing
from .checkout import NOTEBOOK_DIR, ROOT, check_notebooks

#: Every paper's notebooks, in the report's order (papers, then each paper's own order).
NOTEBOOKS = (*all_notebooks(), COMPARISON_NOTEBOOK)
#: each notebook's seconds in a report of each profile from an empty store, measured by `bench/report_speed.py
#: --record` (longest_first)
NOTEBOOK_SECONDS = NOTEBOOK_DIR / "seconds.json"
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
    if out.is_file() and not force and not _failed(nbformat.read(out, as_version=4)):
        return {"name": name, "path": out, "status": "reused", "seconds": 0.0, "error": ""}
    executed_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".running.ipynb")
    start = time.perf_counter()
    os.environ.update(KERNEL_ENV)
    error = ""
    kernel = kernel_config()
    try:
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


def comparison_frame(lines: list[dict]) -> pd.DataFrame:
    """A saved comparison back as compare() made it: JSON wrote NaN as null, so a column of a figure the paper gives
    no numbers for (paper, diff) comes back as None throughout; numbers again, NaN where null."""
    frame = pd.DataFrame(lines)
    for column in ("paper", "mean", "std", "diff", "n", "tolerance", "start_value", "from_start"):
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


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
    tables = table.get("extra", {}).get("tables", {})
    layout = table.get("extra_layout", {})
    for caption in layout.get("tables") or tables:
        frame = pd.DataFrame(tables[caption])
        frame = frame[layout.get("columns", {}).get(caption) or list(frame)]
        parts.append(f"{values_html(frame)}<p class='meta'>{html.escape(caption)}</p>")
    examples = table.get("extra", {}).get("examples")
    if examples:
        parts.append(values_html(pd.DataFrame(examples)))
    parts += [f"<img alt='{html.escape(table['title'])}' src='{src}'>" for src in table["figures"]]
    return "\n".join(parts)


# --- coverage: every artefact of every paper -------------------------------------------------------------------
#: status kind -> style. A table is "built" when all its rows ran on a profile, "partial" when some did, and
#: "reproduced" only on the profile comparable to the paper's numbers (`paper`) with every cell within its metric's
#: tolerance; a paper-profile table with a cell outside is "differs". The shown status names the profile or rows.
STATUS_STYLE = {"reproduced": "ok", "built": "info", "differs": "bad", "partial": "warn",
                "not run on this profile": "warn", "failed": "bad", "not built": "warn",
                "not implemented yet": "todo", "schematic": "muted"}
#: the profile whose numbers are comparable to the papers'
COMPARABLE_PROFILE = "paper"


def _headline(table: dict, paper: str, artefact: str) -> str:
    """`paper X | ours Y` for the artefact's headline cell (the paper module's HEADLINES), if it ran."""
    module = paper_module(paper)
    row_column = getattr(module, "HEADLINES", {}).get(artefact)
    lines = [c for c in table.get("comparison", []) if row_column and (c["row"], c["column"]) == tuple(row_column)]
    if not lines or not lines[0]["n"]:
        return ""
    line = next(comparison_frame(lines[:1]).itertuples())
    return f"{line.row}, {line.column}: paper {paper_text(line)} | ours {ours_text(line)}"


def _outside_tolerance(lines: list[dict]) -> int:
    """How many cells ran, have a paper value, and differ from it by more than their metric's tolerance."""
    frame = comparison_frame(lines)
    return sum(1 for line in frame.itertuples() if line.n and math.isfinite(line.paper) and math.isfinite(line.mean)
               and not within_tolerance(line))


def _status_of(table: dict | None, failed: str | None) -> tuple[str, str, str]:
    """(kind, shown status, detail) of one artefact's notebook table."""
    if failed is not None:
        return "failed", "failed", failed
    if table is None:
        return "not built", "not built", "no table from this notebook for the profile yet: run cse-kit report"
    lines = table.get("comparison", [])
    reasons = "; ".join(not_run_reasons(lines))
    rows = list(dict.fromkeys(line["row"] for line in lines))
    ran = {line["row"] for line in lines if line["n"]}
    profile = table.get("profile", "")
    if lines and not ran:
        return "not run on this profile", "not run on this profile", reasons
    if len(ran) < len(rows):
        return "partial", f"partial ({len(ran)}/{len(rows)} rows, {profile})", f"not run: {reasons}"
    if profile != COMPARABLE_PROFILE:
        return "built", f"built ({profile})", ""
    outside = _outside_tolerance(lines)
    if outside:
        return "differs", "differs (paper)", f"{outside} cell(s) outside tolerance"
    return "reproduced", "reproduced", ""


def comparison_line(table: dict | None, failed: str | None) -> dict:
    """The head-to-head of every method (cse_kit.papers.comparison), listed apart from the papers' artefacts: built on a
    profile or not; it has no paper number to reproduce."""
    line = {"paper": COMPARISON_TITLE, "key": "comparison", "artefact": "all methods", "apart": True,
            "title": "every method, one protocol: seeds, significance, cost", "notebook": COMPARISON_NOTEBOOK,
            "profile": "", "seeds": "", "headline": ""}
    if failed is not None or table is None:
        kind, status, detail = _status_of(table, failed)
        return {**line, "kind": kind, "status": status, "detail": detail}
    return {**line, "kind": "built", "status": f"built ({table['profile']})", "detail": "",
            "profile": table["profile"], "seeds": str(table["seeds"])}


def coverage(tables: dict[str, dict | None], failures: dict[str, str] | None = None,
             papers: list[str] | None = None) -> list[dict]:
    """One line per table and figure of every paper (schematic figures included, marked), with its status (`kind`
    one of STATUS_STYLE, `status` the words shown): reproduced (paper profile, within tolerance), differs (paper
    profile, outside), built (<profile>), partial (k/n rows), not run on this profile (why), failed, not built, or
    not implemented yet. tables: notebook -> its saved table (None: not executed); failures: notebook -> error."""
    failures = failures or {}
    lines = []
    for key in papers or PAPERS:
        by_artefact = {a: nb for nb, covered in paper_notebooks(key).items() for a in covered}
        for art in artefacts(key):
            line = {"paper": PAPERS[key], "key": key, "artefact": art["id"], "title": art["title"],
                    "notebook": by_artefact.get(art["id"], ""), "profile": "", "seeds": "", "headline": ""}
            if not art.get("data", True):
                line.update(kind="schematic", status="schematic", detail="a diagram: no data to reproduce")
            elif not line["notebook"]:
                line.update(kind="not implemented yet", status="not implemented yet",
                            detail="no notebook reproduces it yet")
            else:
                table = tables.get(line["notebook"])
                kind, status, detail = _status_of(table, failures.get(line["notebook"]))
                line.update(kind=kind, status=status, detail=detail)
                if table is not None and kind in ("reproduced", "built", "differs", "partial"):
                    line.update(profile=table["profile"], seeds=str(table["seeds"]),
                                headline=_headline(table, key, art["id"]))
            lines.append(line)
    if papers is None or COMPARISON_NOTEBOOK in tables:
        lines.append(comparison_line(tables.get(COMPARISON_NOTEBOOK), failures.get(COMPARISON_NOTEBOOK)))
    return lines


def tallies(lines: list[dict]) -> dict[str, dict[str, int]]:
    """paper -> {"artefacts": data-bearing count, and a count per status kind}."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        if line["kind"] == "schematic" or line.get("apart"):
            continue
        counts = out.setdefault(line["paper"], {"artefacts": 0})
        counts["artefacts"] += 1
        counts[line["kind"]] = counts.get(line["kind"], 0) + 1
    return out


def tally_text(lines: list[dict], profile: str) -> str:
    """"DiffCSE 16/16 built on smoke, 0 reproduced; ...": what ran and what matches the paper, per paper."""
    parts = []
    for paper, counts in tallies(lines).items():
        built = sum(counts.get(k, 0) for k in ("built", "reproduced", "differs"))
        partial = counts.get("partial", 0)
        text = f"{paper} {built}/{counts['artefacts']} built on {profile}"
        text += f" ({partial} partial)" if partial else ""
        text += f", {counts.get('reproduced', 0)} reproduced" if profile == COMPARABLE_PROFILE else ""
        parts.append(text)
    return "; ".join(parts)


def scope_html(profile: str, evidence_href: str | None = None) -> str:
    """What the profile can and cannot show, in one sentence with a link to its evidence (PROFILE_SCOPES: cpu,
    mini), or ""."""
    if profile not in PROFILE_SCOPES:
        return ""
    scope, evidence = PROFILE_SCOPES[profile]
    return (f"<p class='meta scope'>{html.escape(scope)} (<a href='{html.escape(evidence_href or evidence)}'>"
            f"{html.escape(evidence)}</a>).</p>")


def coverage_html(lines: list[dict], profile: str, evidence_href: str | None = None) -> str:
    """The coverage matrix; on cpu and mini, first what the profile can and cannot show (`evidence_href`: the link
    to its evidence, relative to the page)."""
    data = [line for line in lines if line["kind"] != "schematic" and not line.get("apart")]
    rows = []
    for line in lines:
        nb = f"<a href='#{line['notebook']}'>{html.escape(line['notebook'])}</a>" if line["notebook"] else ""
        detail = " — ".join(x for x in (line["headline"], line["detail"]) if x)
        rows.append(f"<tr class='{STATUS_STYLE[line['kind']]}'><td>{html.escape(line['paper'])}</td>"
                    f"<td>{html.escape(line['artefact'])}</td><td>{html.escape(line['title'])}</td>"
                    f"<td class='status'>{html.escape(line['status'])}</td><td>{html.escape(line['profile'])}</td>"
                    f"<td>{html.escape(line['seeds'])}</td><td>{html.escape(detail)}</td>"
                    f"<td>{nb}</td></tr>")
    return (f"{scope_html(profile, evidence_href)}"
            f"<p class='meta'>{len(data)} data-bearing tables and figures: {html.escape(tally_text(lines, profile))}. "
            "Reproduced means: on the paper profile, every cell within its metric's tolerance; smoke and cpu tables "
            "are built, never reproduced. Schematic figures are listed for completeness.</p><div class='scroll'>"
            "<table class='coverage'><thead><tr><th>paper</th><th>artefact</th><th>what</th><th>status</th>"
            "<th>profile</th><th>seeds</th><th>headline (paper | ours) or reason</th><th>notebook</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _evidence_href(profile: str, out_dir: Path) -> str | None:
    """The profile's scope evidence as a link relative to the page."""
    return os.path.relpath(ROOT / PROFILE_SCOPES[profile][1], out_dir) if profile in PROFILE_SCOPES else None


def coverage_text(lines: list[dict], profile: str) -> str:
    """The coverage matrix for a terminal (`cse-kit status`)."""
    out, paper = [], None
    for line in lines:
        if line["paper"] != paper:
            paper = line["paper"]
            out.append(f"\n{paper}")
        detail = " — ".join(x for x in (line["headline"], line["detail"]) if x)
        where = f" [{line['profile']}, seeds {line['seeds']}]" if line["profile"] else ""
        out.append(f"  {line['artefact']:<10} {line['status']:<24} {line['notebook']:<24}{where} {detail}".rstrip())
    data = [line for line in lines if line["kind"] != "schematic" and not line.get("apart")]
    out.append(f"\n{len(data)} data-bearing tables and figures: {tally_text(lines, profile)}"
               + ("; apart from them: " + COMPARISON_TITLE if any(line.get("apart") for line in lines) else ""))
    if profile in PROFILE_SCOPES:
        out.append("{} ({}).".format(*PROFILE_SCOPES[profile]))
    return "\n".join(out).lstrip("\n")


def _tables_on_disk(results_dir) -> list[dict]:
    root = (Path(results_dir) if results_dir else default_results_dir()) / "tables"
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(table, dict):
            out.append({"name": path.stem, **table})
    return out


def saved_profiles(results_dir) -> list[str]:
    """The profiles the results store holds tables of, in the order paper, cpu, smoke."""
    found = {table.get("profile") for table in _tables_on_disk(results_dir)}
    return [p for p in PROFILES if p in found]


def saved_tables(results_dir, profile: str) -> dict[str, dict]:
    """The tables notebooks last saved in the results store for this profile (what `cse-kit status` reads)."""
    return {table["name"]: table for table in _tables_on_disk(results_dir) if table.get("profile") == profile}


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
    names += [COMPARISON_NOTEBOOK] if not papers else []  # after the papers: it reuses their runs
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


def _outcome(run: dict, done: int, total: int, log) -> None:
    """The line that ends a notebook's part of the console, numbered as notebooks finish (the one numbering of the
    console: several notebooks at once finish in another order than they start), then the warnings it raised."""
    import nbformat

    log(f"[{done} of {total} finished] {run['name']}: {run['status']} ({run['seconds']:.0f} s)"
        f"{' ' + run['error'] if run['error'] else ''}")
    if run["status"] != "reused":
        for warning in notebook_warnings(nbformat.read(run["path"], as_version=4)):
            log(f"    {run['name']}: {warning}")


def _execute_in_worker(name: str, params: dict, executed_dir: Path, force: bool, lines) -> dict:
    """execute() in a worker process of execute_all, its console lines sent back to the parent through `lines`."""
    lines.put(("started", name))
    return execute(name, params, executed_dir, force, lambda line: lines.put(("line", line)))


def _start_worker(threads: int) -> None:
    """A worker of execute_all ignores Ctrl-C: cli.cmd_report stops it (cse_kit.report.stopping), else the pool's exit would
    wait for it. Its kernels share the cores with the other workers' (torch's threads, unless OMP_NUM_THREADS says)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def execute_all(names: list[str], params: dict, executed_dir: Path, force: bool = False, log=print,
                jobs: int = 1) -> list[dict]:
    """execute() each notebook, `jobs` at once (worker processes; the results store's locks make a notebook wait
    for a run another one is training, never train it twice), each one's progress lines to `log` as they come.
    Returns the runs in `names`' order."""
    total = len(names)
    if jobs <= 1 or total <= 1:
        runs = []
        for i, name in enumerate(names, 1):
            log(f"{name}: running ({total - i} notebook(s) not started)")
            runs.append(execute(name, params, executed_dir, force, log))
            _outcome(runs[-1], i, total, log)
        return runs
    import multiprocessing
    import queue
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch or kernel-client state
    finished, started = {}, 0
    order = longest_first(names, params["profile"])
    with context.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                                                           initargs=(threads_per_worker(jobs),)) as pool:
        lines = manager.Queue()
        pending = {pool.submit(_execute_in_worker, name, params, executed_dir, force, lines) for name in order}
        log(f"{total} notebook(s), {min(jobs, total)} at once")
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            while True:
                try:
                    kind, text = lines.get_nowait()
                except queue.Empty:
                    break
                if kind == "started":
                    started += 1
                    log(f"{text}: running ({total - started} notebook(s) not started)")
                else:
                    log(text)
            for future in done:
                run = future.result()
                finished[run["name"]] = run
                _outcome(run, len(finished), total, log)
    return [finished[name] for name in names]


def longest_first(names: list[str], profile: str) -> list[str]:
    """names in the order their notebooks start when several run at once: the longest first (their seconds in the
    profile's last measured report, NOTEBOOK_SECONDS), so that no long notebook starts last and runs alone at the end
    (the smoke report's longest is a fifth of it). One not measured may be long: it starts first."""
    try:
        seconds = json.loads(NOTEBOOK_SECONDS.read_text()).get(profile, {})
    except FileNotFoundError:
        seconds = {}
    unmeasured = max(seconds.values(), default=0) + 1
    return sorted(names, key=lambda name: -seconds.get(name, unmeasured))


def default_jobs(profile: str) -> int:
    """Notebooks at once unless told: a smoke run's tiny models keep at most one core busy, so one per core up to 4
    (what that makes of the smoke report's time: docs/notebooks.md, measured by bench/report_speed.py); cpu and
    paper training use every core or the GPU: one."""
    return max(1, min(4, os.cpu_count() or 1)) if sizing(profile) == "smoke" else 1


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
        if run["status"] == "failed" or _failed(nb) or table is None:
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
    return index
