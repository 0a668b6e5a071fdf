"""A notebook's table for the report: save_table writes it to the results store's tables/ and hands it to the report
as a display message of TABLE_MIMETYPE (the report reads it back from the executed notebook)."""

from __future__ import annotations

import json
import time

import pandas as pd

from ..data.published import paper_key
from ..io import write_json_atomic
from .profiles import PROFILE_NOTES
from .rows import stale_note
from .session import AMP_NOTE, Setup
from .typeset import write_tables


def save_table(s: Setup, name: str, title: str, comparison: pd.DataFrame | None = None, figures=(), notes=(),
               extra: dict | None = None, paper: str = "diffcse", latex: bool = False, markdown: bool = False) -> None:
    """What the report shows for one notebook, written atomically to results_dir/tables/<name>.json: the paper,
    the comparison, the figures as PNG data URIs, notes, the profile and seeds. `latex`, `markdown`: each of its
    tables also as <name>*.tex (booktabs) and <name>*.md beside it, as `cse-kit report --latex DIR` writes them
    (typeset.py). Returns nothing, so a notebook's last cell shows no machine path (the report page is meant to be
    shared)."""
    from ..environment import describe
    from .plots import to_data_uri

    table = strict_json({"name": name, "paper": paper_key(paper) if paper else None, "title": title,
                         "profile": s.profile, "profile_note": PROFILE_NOTES[s.profile], "seeds": s.seeds,
                         "notes": list(notes) + ([AMP_NOTE] if s.store.amp else [])
                         + ([stale_note(s.stale)] if s.stale else []),
                         "figures": [to_data_uri(f) for f in figures],
                         "comparison": [] if comparison is None else json.loads(comparison.to_json(orient="records")),
                         "extra": extra or {}, "extra_layout": extra_layout(extra or {}),
                         "environment": describe(), "evaluation_amp": s.store.amp,
                         "written": time.strftime("%Y-%m-%dT%H:%M:%S")})
    write_json_atomic(s.store.root / "tables" / f"{name}.json", table)
    if latex or markdown:
        written = write_tables(table, s.store.root / "tables", latex=latex, markdown=markdown)
        print(f"wrote {', '.join(path.name for path in written)} into the results store's tables/")
    _publish(table)


def extra_layout(extra: dict) -> dict:
    """The order of the extra tables and of each one's columns, as the notebook made them: the display message that
    carries the table to the report has its keys sorted on the way (nbformat), which put a table's `method` column
    fifth and its `cost` table before its `scores`."""
    tables = extra.get("tables", {})
    columns = {caption: list(dict.fromkeys(k for record in records for k in record))
               for caption, records in tables.items()}
    return {"tables": list(tables), "columns": columns}


def strict_json(value):
    """value with every NaN and infinity (a row the profile could not run, in an extra table) as None: the table is
    sent to the notebook as a display message, which must be strict JSON (jupyter_client's json packer refuses NaN,
    falls back and warns that such messages are deprecated; a future client may drop them)."""
    return json.loads(json.dumps(value), parse_constant=lambda _: None)


#: The MIME type under which a notebook hands its table to the report (read back from the executed notebook).
TABLE_MIMETYPE = "application/vnd.cse-kit.table+json"


def _publish(table: dict) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display({TABLE_MIMETYPE: table}, raw=True)
