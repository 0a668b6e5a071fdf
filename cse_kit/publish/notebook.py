"""Publishing from a notebook: the command that publishes each trained run of a table, and one row's run published."""

from __future__ import annotations

from .folder import Published, publish
from .run import PublishError, stored_record


def commands(long, s, out: str = "published") -> list[str]:
    """The command that publishes each trained run of a notebook's table (the long table ex.run_rows returns; `s` its
    ex.setup), one line per (row, seed): `cse-kit publish KEY --results-dir ... --out <out>/<row>-seed<seed>`."""
    lines = []
    for line in long[long.status == "ok"].itertuples():
        record = stored_record(s.store, line.key)
        if record is None or record["subject"]["kind"] != "trained":
            continue  # a pretrained model evaluated as it is
        folder = f"{out}/{_slug(line.row)}-seed{line.seed}"
        lines.append(f"{line.row}, seed {line.seed}: cse-kit publish {line.key} --results-dir {s.store.root} "
                     f"--out {folder}")
    return lines


def row(long, label: str, s, out, *, seed: int | None = None, **kwargs) -> Published:
    """Publish a table row's run from a notebook (its first seed unless `seed`) to `out`; kwargs as publish
    (repo_id, license, st). The folder's card reads every seed of the row that the store holds."""
    lines = long[(long.row == label) & (long.status == "ok")]
    if seed is not None:
        lines = lines[lines.seed == seed]
    if lines.empty:
        rows = ", ".join(dict.fromkeys(long.row))
        raise PublishError(f"no finished run of row {label!r}" + (f" with seed {seed}" if seed is not None else "")
                           + f" in this table; its rows: {rows}")
    return publish(lines.iloc[0].key, out, results_dir=s.store.root, **kwargs)


def _slug(label: str) -> str:
    import re

    return re.sub(r"-+", "-", "".join(c if c.isalnum() or c in "_." else "-" for c in label)).strip("-").lower()
