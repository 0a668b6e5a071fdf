"""The coverage matrix: every table and figure of the four papers with its status (reproduced, differs, built,
partial, not run on this profile, failed, not built, not implemented yet, schematic), as HTML for the page and as text
for `cse-kit status`; the tables notebooks saved in the results store, read back (saved_tables; a saved comparison
as a frame again is experiments' comparison_frame)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from ..data.published import artefacts
from ..experiments import PROFILE_SCOPES
from ..experiments.paper_vs_ours import comparison_frame
from ..experiments.render import not_run_reasons, ours_text, paper_text, within_tolerance
from ..papers import PAPERS, paper_module
from ..papers import notebooks as paper_notebooks
from ..papers.comparison import NOTEBOOK as COMPARISON_NOTEBOOK
from ..papers.comparison import TITLE as COMPARISON_TITLE
from ..papers.equal_budget import NOTEBOOK as EQUAL_BUDGET_NOTEBOOK
from ..papers.equal_budget import TITLE as EQUAL_BUDGET_TITLE
from ..results import default_results_dir
from ..train.presets import PROFILES


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


#: the notebooks of every method, listed apart from the papers' artefacts: notebook -> (heading, artefact, what)
APART = {COMPARISON_NOTEBOOK: (COMPARISON_TITLE, "all methods",
                               "every method, one protocol: seeds, significance, cost"),
         EQUAL_BUDGET_NOTEBOOK: (EQUAL_BUDGET_TITLE, "all tuned",
                                 "every method searched with the same trials: chosen settings, tests, cost")}


def comparison_line(table: dict | None, failed: str | None, notebook: str = COMPARISON_NOTEBOOK) -> dict:
    """A notebook of every method (the head-to-head, cse_kit.papers.comparison, or the equal tuning budget), listed
    apart from the papers' artefacts: built on a profile or not; it has no paper number to reproduce."""
    heading, artefact, what = APART[notebook]
    line = {"paper": heading, "key": "comparison", "artefact": artefact, "apart": True, "title": what,
            "notebook": notebook, "profile": "", "seeds": "", "headline": ""}
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
    lines += [comparison_line(tables.get(name), failures.get(name), name) for name in APART
              if papers is None or name in tables]
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
    apart = [line["paper"] for line in lines if line.get("apart")]
    out.append(f"\n{len(data)} data-bearing tables and figures: {tally_text(lines, profile)}"
               + ("; apart from them: " + ", ".join(apart) if apart else ""))
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
