"""MTEB's results layout: where the record holds MTEB results, `mteb_results/<org>__<name>/<revision>/` with
`model_meta.json` and one JSON per task, as MTEB's results repository holds them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..io import write_json_atomic
from ..train.export import ST_POOLING, read_metadata
from .numbers import mteb_values
from .origins import BASE_MODELS, citations, method_papers
from .run import Run, model_name

MTEB_DIR = "mteb_results"


def mteb_revision(run: Run) -> str:
    """The revision MTEB's results name: the record's key, which names this model's training and evaluation."""
    return run.record["key"]


def write_mteb_results(run: Run, folder: Path, repo_id: str | None) -> Path:
    """<folder>/<org>__<name>/<revision>/model_meta.json and <Task>.json (mteb's TaskResult as it saved it), as
    MTEB's results repository holds them: a pull request there copies the folder under results/."""
    from mteb.models import ModelMeta
    from mteb.models.model_meta import ScoringFunction

    name = model_name(run, repo_id)
    meta = read_metadata(run.model_dir) or {}
    base = BASE_MODELS.get(run.config.get("model", ""), (None, None))
    paper_key, _ = method_papers(run.method)
    model_meta = ModelMeta.create_empty({
        "name": name, "revision": mteb_revision(run), "release_date": run.record.get("created", "")[:10] or None,
        "languages": ["eng-Latn"], "embed_dim": embed_dim(run.model_dir), "license": base[1],
        "open_weights": True, "framework": ["PyTorch", "Sentence Transformers"] if meta.get("pooler") in ST_POOLING
        else ["PyTorch"], "similarity_fn_name": ScoringFunction.COSINE, "use_instructions": False,
        "adapted_from": base[0],
        "reference": f"https://huggingface.co/{repo_id}" if repo_id else None,
        "public_training_code": "https://github.com/voidism/DiffCSE" if run.method == "diffcse" else None,
        "citation": citations()[paper_key]["bibtex"] if paper_key else None,
        "training_datasets": set(),
        "n_parameters": _parameters(run.model_dir)})
    where = folder / name.replace("/", "__") / mteb_revision(run)
    where.mkdir(parents=True)
    write_json_atomic(where / "model_meta.json", json.loads(json.dumps(model_meta.to_dict(), default=str)))
    for task, result in mteb_values(run.record).items():
        write_json_atomic(where / f"{task}.json", result["result"])
    return folder


def embed_dim(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["hidden_size"])


def _parameters(model_dir: Path) -> int | None:
    from safetensors import safe_open

    path = model_dir / "model.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), "pt") as f:
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()))
