"""The published folder, written whole or not at all: a sentence-transformers model where its vectors are the kit's
(checked on sentences at publish time), else the kit's export as it is; its card; its MTEB results."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..io import atomic_dir
from ..train.export import METADATA, ST_POOLING, read_metadata
from .card import model_card
from .mteb_results import MTEB_DIR, write_mteb_results
from .numbers import mteb_values
from .run import PublishError, find_run

#: the sentences publish encodes with sentence-transformers and with the kit, which must agree (SIMILAR)
CHECK_SENTENCES = ("A man is playing a guitar.", "Someone plays an instrument on a stage.",
                   "The stock market fell sharply on Monday after the announcement.",
                   "Three children are running through a field of tall grass.", "No.",
                   "A woman slices a tomato while a dog sleeps under the kitchen table, ignoring the rain outside.")
#: the largest difference (relative to the vectors' largest entry) between sentence-transformers' vectors and the
#: kit's that still makes the folder a sentence-transformers model: float32 along the same kernels
SIMILAR = 1e-6
README = "README.md"


@dataclass
class Published:
    folder: Path
    kind: str  # "sentence-transformers" or "transformers"
    card: str
    mteb: Path | None
    st_difference: float | None  # sentence-transformers' vectors against the kit's (relative), where checked
    url: str | None = None  # the pushed commit


def st_refusal(model_dir: Path, pooler: str | None) -> str | None:
    """Why the model cannot be a sentence-transformers model (None when it can)."""
    from ..models.adapters import HoulsbyAdapters
    from ..models.prefix import PrefixedEncoder

    if (model_dir / PrefixedEncoder.FILE).is_file():
        return ("it attends a learned prefix at every layer (DiffAug), which sentence-transformers' Transformer cannot "
                "pass")
    if (model_dir / HoulsbyAdapters.FILE).is_file():
        return "it holds bottleneck adapters (DiffAug Table 3), which sentence-transformers' Transformer does not load"
    if pooler not in ST_POOLING:
        return f"its pooler {pooler} has no sentence-transformers equivalent (exportable: {', '.join(ST_POOLING)})"
    return None


def kit_vectors(model_dir: Path, sentences) -> "np.ndarray":
    """The vectors `cse-kit eval` computes for sentences with the model folder's own settings (cse_kit.json)."""
    from ..eval import Encoder
    from ..models import load_model
    from ..train.export import ExportSettings

    from ..models import quiet_transformers

    settings = ExportSettings(model_dir)
    with quiet_transformers():
        tokenizer, model = load_model(str(model_dir))
    return Encoder(model, tokenizer, settings.pooler, template=settings.prompt, max_length=settings.max_length,
                   device="cpu", progress=False).encode(list(sentences))


def st_difference(st_dir: Path, model_dir: Path) -> float:
    """The largest difference between sentence-transformers' vectors of CHECK_SENTENCES and the kit's, relative to
    the largest entry of the kit's."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from ..environment import kernel_loading
    from ..models import quiet_transformers

    ours = np.asarray(kit_vectors(model_dir, CHECK_SENTENCES), dtype=np.float64)
    with quiet_transformers():
        model = SentenceTransformer(str(st_dir), device="cpu", model_kwargs=kernel_loading())
    theirs = model.encode(list(CHECK_SENTENCES), convert_to_numpy=True, show_progress_bar=False)
    return float(np.abs(np.asarray(theirs, dtype=np.float64) - ours).max() / np.abs(ours).max())


def publish(target: str, out, *, results_dir=None, repo_id: str | None = None, license: str | None = None,
            st: bool = True) -> Published:
    """Write the published folder of a run (find_run) to `out`, whole or not at all. repo_id (ORG/NAME): where it will
    be pushed (named in the card, MTEB's model name); license: the model's, where the base model's is not known or
    another is meant; st=False keeps the kit's export even where a sentence-transformers model is possible."""
    from ..models import quiet_transformers
    from ..train.export import export_sentence_transformers

    if repo_id is not None and (repo_id.count("/") != 1 or not all(repo_id.split("/"))):
        raise PublishError(f"--repo-id {repo_id!r} is not ORG/NAME (a user or organisation, a slash, a name)")
    run = find_run(target, results_dir)
    out = Path(out).expanduser()
    if out.resolve() == run.model_dir.resolve() or run.model_dir.resolve() in out.resolve().parents:
        raise PublishError(f"--out {out} is the run's model folder or inside it: choose a new folder")
    meta = read_metadata(run.model_dir) or {}
    refusal = st_refusal(run.model_dir, meta.get("pooler")) if st else "asked for (--no-st)"
    with atomic_dir(out) as tmp:
        difference = None
        if refusal is None:
            with quiet_transformers():
                export_sentence_transformers(run.model_dir, tmp / "st")
            for item in (tmp / "st").iterdir():
                item.rename(tmp / item.name)
            (tmp / "st").rmdir()
            for name in (METADATA,):
                shutil.copy2(run.model_dir / name, tmp / name)
            difference = st_difference(tmp, run.model_dir)
            if not difference <= SIMILAR:
                raise PublishError(f"sentence-transformers' vectors of {run.model_dir} differ from the kit's by "
                                   f"{difference:.2g} (relative; at most {SIMILAR:g} allowed): publish it with "
                                   "--no-st (the kit's export, loaded with cse-kit)")
        else:
            for item in run.model_dir.iterdir():
                (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        kind = "transformers" if refusal else "sentence-transformers"
        mteb_dir = None
        if run.record and mteb_values(run.record):
            mteb_dir = write_mteb_results(run, tmp / MTEB_DIR, repo_id)
        card = model_card(run, kind, repo_id=repo_id, license=license, refusal=refusal, difference=difference,
                          mteb_dir=mteb_dir and MTEB_DIR)
        (tmp / README).write_text(card)
    return Published(out, kind, card, out / MTEB_DIR if mteb_dir else None, difference)
