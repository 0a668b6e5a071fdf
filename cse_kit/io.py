"""Files written so that nothing is ever half-written: a temporary file in the same folder, then os.replace."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path, obj) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
