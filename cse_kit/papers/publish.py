"""Publishing a trained run (`cse-kit publish`): a folder that loads as it will be used, a model card whose every
number comes from the run's record beside the paper's, MTEB's results layout, and the push to the Hugging Face Hub.

The folder is a sentence-transformers model where its vectors are the kit's (the poolers `export-st` maps, no DiffAug
prefix or adapters; checked on sentences at publish time), else the kit's export as it is (a Hugging Face model with
cse_kit.json), which the card says how to load. README.md is the card: front matter that `huggingface_hub.ModelCard`
reads (library_name, pipeline_tag, tags, base_model, datasets, license, and `model-index` with the record's STS,
transfer and MTEB results as `huggingface_hub` writes them), then what was trained, the results as mean ± std over the
seeds the store holds of the same configuration beside the paper's printed number, the training's time and hardware,
the code that made it, how to load and evaluate it, and the BibTeX of the method's paper and its baselines. A smoke or
cpu run's card says in its first lines that it is not the paper's model, and names itself so in its metadata (no
`mteb` tag, its profile in the model-index name). Where the record holds MTEB results, `mteb_results/` lays them out
as MTEB's results repository does (`<org>__<name>/<revision>/model_meta.json` and one JSON per task)."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..data.published import PAPERS, paper_setting, paper_spec, paper_value
from ..experiments import PROFILE_NOTES, STS_COLUMNS, TRANSFER_COLUMNS
from ..io import atomic_dir, write_json_atomic
from ..results import CorruptRecord, ResultStore, check_record, read_record
from ..train.config import OFFICIAL_VARIANTS, VARIANT_FIELDS, TrainConfig
from ..train.export import METADATA, ST_POOLING, read_metadata

#: method -> (the paper it is from, the papers of the baselines it is compared with), keys of citations.json
METHOD_PAPERS = {"simcse": ("simcse", ()), "diffcse": ("diffcse", ("simcse",)), "scd": ("scd", ("simcse",)),
                 "esimcse": ("esimcse", ("simcse",)), "diffaug": ("diffaug", ("simcse", "promptbert")),
                 "promptbert": ("promptbert", ("simcse",)), "consert": ("consert", ("simcse",))}
#: a method of one's own (docs/extending.md): no paper yet; cited beside SimCSE, the preset family it trains on
OWN_METHOD_PAPERS = (None, ("simcse",))


def method_papers(method: str) -> tuple[str | None, tuple]:
    """(the paper a method is from, its baselines' papers); a method of one's own is from none."""
    return METHOD_PAPERS.get(method, OWN_METHOD_PAPERS)


def method_words(method: str) -> str:
    """How a card names a method's origin: its paper, or a method of one's own."""
    paper_key, _ = method_papers(method)
    return citations()[paper_key]["paper"] if paper_key else f"`{method}`, a method of one's own"


#: preset -> the printed rows that stand for it: (paper, table, row) with STS columns (STS12 ... Avg.) or transfer
#: columns (MR ... Avg.); an official-code preset stands for the paper's row as its paper preset does
PAPER_ROWS = {
    "simcse-bert": [("diffcse", 1, "SimCSE-BERT-base"), ("diffcse", 2, "SimCSE-BERT-base")],
    "simcse-roberta": [("diffcse", 1, "SimCSE-RoBERTa-base"), ("diffcse", 2, "SimCSE-RoBERTa-base")],
    "simcse-sup-bert": [("diffaug", 1, "SimCSE (supervised)")],
    "diffcse-bert-sts": [("diffcse", 1, "DiffCSE-BERT-base")],
    "diffcse-roberta-sts": [("diffcse", 1, "DiffCSE-RoBERTa-base")],
    "diffcse-bert-transfer": [("diffcse", 2, "DiffCSE-BERT-base")],
    "diffcse-roberta-transfer": [("diffcse", 2, "DiffCSE-RoBERTa-base")],
    "scd-bert": [("scd", 1, "SCD-BERT-base"), ("scd", 2, "SCD-BERT-base")],
    "scd-bert-official": [("scd", 1, "SCD-BERT-base"), ("scd", 2, "SCD-BERT-base")],
    "scd-roberta": [("scd", 1, "SCD-RoBERTa-base"), ("scd", 2, "SCD-RoBERTa-base")],
    "esimcse-bert": [("esimcse", 3, "ESimCSE-BERT-base"), ("esimcse", 11, "ESimCSE")],
    "esimcse-bert-large": [("esimcse", 3, "ESimCSE-BERT-large")],
    "esimcse-roberta": [("esimcse", 3, "ESimCSE-RoBERTa-base")],
    "esimcse-roberta-large": [("esimcse", 3, "ESimCSE-RoBERTa-large")],
    "diffaug-semi-bert": [("diffaug", 1, "DiffAug (ours)")],
    "diffaug-semi-bert-official": [("diffaug", 1, "DiffAug (ours)")],
    "diffaug-semi-aux-bert": [("diffaug", 1, "DiffAug (ours) w/ aux loss")],
    "diffaug-semi-aux-bert-official": [("diffaug", 1, "DiffAug (ours) w/ aux loss")],
    "diffaug-sup-bert": [("diffaug", 1, "DiffAug (ours) (supervised)")],
    "diffaug-sup-bert-official": [("diffaug", 1, "DiffAug (ours) (supervised)")],
    "promptbert-bert": [("diffaug", 1, "PromptBERT")],
    "promptbert-sup-bert": [("diffaug", 1, "PromptBERT (supervised)")],
    "consert-bert": [("diffaug", 1, "ConSERT")],
}
#: a model reference of the profiles -> (its Hub id, its licence); a base model not listed has no known licence
BASE_MODELS = {"bert-base-uncased": ("google-bert/bert-base-uncased", "apache-2.0"),
               "bert-large-uncased": ("google-bert/bert-large-uncased", "apache-2.0"),
               "roberta-base": ("FacebookAI/roberta-base", "mit"),
               "roberta-large": ("FacebookAI/roberta-large", "mit"),
               "all-MiniLM-L6-v2": ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")}
#: training data -> its Hub dataset (Wiki1M and SimCSE's NLI triplets are files of one dataset; the sample is Wiki1M's
#: first lines; the SNLI triplets are built from SNLI's dev and test)
DATASETS = {"Wiki1M": "princeton-nlp/datasets-for-simcse", "Wiki1M-sample": "princeton-nlp/datasets-for-simcse",
            "NLI": "princeton-nlp/datasets-for-simcse", "SNLI-triplets": "stanfordnlp/snli",
            "WikiText-103": "Salesforce/wikitext"}
#: the sentences publish encodes with sentence-transformers and with the kit, which must agree (SIMILAR)
CHECK_SENTENCES = ("A man is playing a guitar.", "Someone plays an instrument on a stage.",
                   "The stock market fell sharply on Monday after the announcement.",
                   "Three children are running through a field of tall grass.", "No.",
                   "A woman slices a tomato while a dog sleeps under the kitchen table, ignoring the rain outside.")
#: the largest difference (relative to the vectors' largest entry) between sentence-transformers' vectors and the
#: kit's that still makes the folder a sentence-transformers model: float32 along the same kernels
SIMILAR = 1e-6
README = "README.md"
MTEB_DIR = "mteb_results"
#: the prefix of each method's own settings in TrainConfig
OWN_SETTINGS = {"generator": "diffcse", "mask_ratio": "diffcse", "lam": "diffcse", "scd_": "scd", "consert_": "consert", "esimcse_": "esimcse", "promptbert_": "promptbert",
                "diffaug_": "diffaug"}
#: smoke and cpu runs: not the papers' models
NOT_PAPER_PROFILES = ("smoke", "cpu", "mini", "mini-rehearsal")


class PublishError(ValueError):
    """What stops a publish or a push, in one line that names the fix."""


def citations() -> dict:
    return json.loads(resources.files(__package__).joinpath("citations.json").read_text())


@dataclass
class Run:
    """What a card is written from: the run's record (None for a run trained outside a results store, with only its
    summary.json), its model folder, and the records of the same configuration with other seeds."""

    model_dir: Path
    config: dict
    record: dict | None
    summary: dict | None
    seeds: list[dict]

    @property
    def profile(self) -> str:
        return self.config.get("profile") or "?"

    @property
    def preset(self) -> str | None:
        return self.config.get("preset")

    @property
    def method(self) -> str:
        return self.config["method"]


def _is_key(text: str) -> bool:
    return len(text) == 20 and all(c in "0123456789abcdef" for c in text)


def find_run(target: str, results_dir=None) -> Run:
    """A record key of the results store, a run folder of it (`<store>/runs/<key>`) or its model, or a `cse-kit
    train` run folder (runs/<preset>-<profile>, with summary.json) or its model."""
    store = ResultStore(results_dir)
    path = Path(target).expanduser()
    if not path.exists() and _is_key(target):
        record = _load(store.record_path(target), target)
        if record is None:
            raise PublishError(f"no record {target} in the results store {store.root} (--results-dir names another "
                               "store)")
        return _from_record(store, record)
    if not path.is_dir():
        raise PublishError(f"{target} is neither a folder nor a record key of the results store {store.root}: give "
                           "a run folder, its model folder, or a record key (a notebook's table has one per run)")
    path = path.resolve()
    run_dir = path.parent if path.name == "model" else path
    if run_dir.parent.name == "runs" and _is_key(run_dir.name):  # a results store's run, wherever the store is
        root = run_dir.parent.parent
        record = _load(root / "records" / f"{run_dir.name}.json", run_dir.name)
        if record is not None:
            return _from_record(ResultStore(root), record)
    summary_path = run_dir / "summary.json"
    if (run_dir / "model").is_dir() and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        return Run(run_dir / "model", summary["config"], None, summary, [])
    raise PublishError(f"{target} is not a trained run: give the folder `cse-kit train` wrote (with summary.json and "
                       "model/), a results store's runs/<key>, or a record key")


def _load(path: Path, key: str) -> dict | None:
    if not path.is_file():
        return None
    record = read_record(path)
    try:
        check_record(record, key)
    except CorruptRecord as err:
        raise PublishError(f"record {path} is damaged ({err}): run its notebook again to recompute it") from None
    return record


def _from_record(store: ResultStore, record: dict) -> Run:
    if record["subject"]["kind"] != "trained":
        raise PublishError(f"record {record['key']} evaluates {record['model_dir']} as it is; only a model the kit "
                           "trained is published")
    model_dir = store.run_dir(record["key"]) / "model"
    if not model_dir.is_dir():
        raise PublishError(f"the model of record {record['key']} is gone ({model_dir}): run its notebook again with "
                           "force=True to retrain it")
    return Run(model_dir, record["config"], record, None, same_configuration(store, record))


def same_configuration(store: ResultStore, record: dict) -> list[dict]:
    """The store's records of record's configuration under every seed it holds (record among them), computed by the
    same code on the same data and evaluation protocol, by seed."""
    def what(r):
        subject = {k: v for k, v in r["subject"].items() if k != "seed"}
        return (json.dumps(subject, sort_keys=True), r.get("code_version"), r.get("data_checksums"),
                bool(r.get("evaluation_amp")))

    found = {record["seed"]: record}
    for path in sorted((store.root / "records").glob("*.json")):
        try:
            other = read_record(path)
            check_record(other, path.stem)
        except (ValueError, OSError):
            continue
        if other.get("subject", {}).get("kind") == "trained" and what(other) == what(record):
            found.setdefault(other["seed"], other)
    return [found[seed] for seed in sorted(found)]


# --- the numbers ---------------------------------------------------------------------------------------------------
def sts_values(record: dict) -> dict | None:
    """STS test Spearman ×100 by column (STS12 ... SICK-R, Avg.), the SentEval 'all' aggregation, or None."""
    sts = record["metrics"].get("sts_test")
    if not sts:
        return None
    out = {col: (sts[t]["all"]["spearman"] if "all" in sts[t] else sts[t]["test"]["spearman"])
           for t, col in STS_COLUMNS.items()}
    return {**out, "Avg.": sts["avg"]}


def transfer_values(record: dict) -> tuple[str, dict] | None:
    """(evaluation name, accuracy by column MR ... MRPC, Avg.) of the record's transfer test, or None."""
    name = next((k for k in ("transfer_test", "transfer_fasttest") if k in record["metrics"]), None)
    if name is None:
        return None
    tr = record["metrics"][name]
    return name, {**{col: tr[t]["acc"] for t, col in TRANSFER_COLUMNS.items()}, "Avg.": tr["avg"]}


def mteb_values(record: dict) -> dict:
    """MTEB task -> its stored result (main score 0-1, mteb's TaskResult)."""
    return dict(record["metrics"].get("mteb", {}))


def over_seeds(values: list[float]) -> tuple[float, float, int]:
    """mean, std (ddof 1; NaN for one value), n."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return mean, std, n


def paper_numbers(preset: str | None, kind: str, method: str | None = None) -> tuple[str, dict] | None:
    """(where: "DiffCSE Table 1, DiffCSE-BERT-base", column -> printed value) of the preset's row of `kind` ("sts" or
    "transfer"), or None where the papers print none; none either for another method trained on the preset (a method
    of one's own on SimCSE's preset is not SimCSE)."""
    from ..train.presets import PRESETS

    if method is not None and preset in PRESETS and PRESETS[preset][1]["method"] != method:
        return None
    for paper, table, row in PAPER_ROWS.get(preset, []):
        spec = paper_spec(paper)["tables"][str(table)]
        if (kind == "sts") != ("STS12" in spec["columns"]):
            continue
        setting = paper_setting(table, row, paper)
        values = {col: paper_value(table, row, col, paper, setting=setting) for col in spec["columns"]}
        return f"{PAPERS[paper]} Table {table}, {row}" + (f" ({setting})" if setting else ""), values
    return None


# --- the folder ----------------------------------------------------------------------------------------------------
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
        return "it attends a learned prefix at every layer (DiffAug), which sentence-transformers' Transformer cannot pass"
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

    from ..models import quiet_transformers

    ours = np.asarray(kit_vectors(model_dir, CHECK_SENTENCES), dtype=np.float64)
    with quiet_transformers():
        model = SentenceTransformer(str(st_dir), device="cpu")
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


def model_name(run: Run, repo_id: str | None) -> str:
    """ORG/NAME: the repository's, else cse-kit/<preset>-<profile>-seed<seed> (MTEB's model names have an org)."""
    named = run.preset if run.preset and run.method in METHOD_PAPERS else run.method  # one's own: its name
    return repo_id or f"cse-kit/{named}-{run.profile}-seed{run.config.get('seed')}"


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
        "languages": ["eng-Latn"], "embed_dim": _embed_dim(run.model_dir), "license": base[1],
        "open_weights": True, "framework": ["PyTorch", "Sentence Transformers"] if meta.get("pooler") in ST_POOLING
        else ["PyTorch"], "similarity_fn_name": ScoringFunction.COSINE, "use_instructions": False, "adapted_from": base[0],
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


def _embed_dim(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["hidden_size"])


def _parameters(model_dir: Path) -> int | None:
    from safetensors import safe_open

    path = model_dir / "model.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), "pt") as f:
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()))


# --- the card ------------------------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _mean_std(values: list[float]) -> str:
    mean, std, n = over_seeds(values)
    return f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f} (one seed)"


def differences(run: Run) -> tuple[dict, dict]:
    """(settings of this run that differ from its preset on its profile, settings the profile changes in the paper
    recipe), each name -> (this, reference); empty where the preset is unknown."""
    from ..train.presets import PRESETS, build_config

    if run.preset not in PRESETS:
        return {}, {}
    ignored = ("output_dir", "data_dir", "log_with", "seed", "profile", "extra")
    config = {k: v for k, v in run.config.items() if k not in ignored}
    try:
        preset = build_config(run.preset, run.profile, {"seed": run.config.get("seed", 42)}).to_dict()
        paper = build_config(run.preset, "paper", {"seed": run.config.get("seed", 42)}).to_dict()
    except ValueError:
        return {}, {}
    def relevant(name):  # another method's settings (a profile sets SCD's projector for every run) are left out
        return not any(name.startswith(prefix) and method != run.method for prefix, method in OWN_SETTINGS.items())

    own = {k: (v, preset.get(k)) for k, v in config.items() if preset.get(k) != v and relevant(k)}
    profile = {k: (v, paper.get(k)) for k, v in preset.items() if k not in ignored and paper.get(k) != v
               and relevant(k)} if run.profile != "paper" else {}
    return own, profile


def official_script(run: Run) -> str | None:
    """The official run an official-code variant reproduces, in the words of its training header."""
    from ..train.presets import official_run

    field = VARIANT_FIELDS.get(run.method)
    if run.config.get(field) not in OFFICIAL_VARIANTS:
        return None
    try:
        return official_run(TrainConfig(**{k: v for k, v in run.config.items()
                                           if k in TrainConfig.__dataclass_fields__}))
    except (TypeError, ValueError):
        return None


def _data_words(config: dict) -> str:
    n = config.get("max_examples")
    return f"{config['data']}" + (f", its first {n:,} examples" if n else "")


def _base_words(model: str) -> str:
    from ..models import SMOKE_MODELS

    if model in SMOKE_MODELS:
        return f"{model}, a tiny random BERT the kit builds in code (2 layers, hidden size 32), not a pretrained model"
    hub = BASE_MODELS.get(model, (model, None))[0]
    return f"[{hub}](https://huggingface.co/{hub})" if "/" in hub else hub


def card_data(run: Run, kind: str, repo_id: str | None, license: str | None):
    """The front matter, as huggingface_hub writes it (ModelCardData; EvalResult for model-index)."""
    from huggingface_hub import EvalResult, ModelCardData

    paper_key, _ = method_papers(run.method)
    cite = citations()
    base, base_license = BASE_MODELS.get(run.config.get("model", ""), (None, None))
    honest = run.profile in NOT_PAPER_PROFILES
    tags = ["cse-kit", "sentence-similarity", "feature-extraction", "contrastive-learning", run.method,
            f"cse-kit-profile-{run.profile}"]
    tags += [f"arxiv:{cite[paper_key]['arxiv']}"] if paper_key and cite[paper_key].get("arxiv") else []
    if kind == "sentence-transformers":
        tags.insert(0, "sentence-transformers")
    if run.record and mteb_values(run.record) and not honest:
        tags.append("mteb")
    datasets = sorted({DATASETS[d] for d in (run.config.get("data"), run.config.get("nli_data")) if d in DATASETS})
    name = model_name(run, repo_id)
    if honest:
        name += f" ({run.profile} profile: not the {cite[paper_key]['paper']} paper's model)" if paper_key else \
            f" ({run.profile} profile)"
    source = {}
    results = []
    record = run.record
    if record:
        sample = record["metrics"].get("sts_test", {}).get("sample_per_subset")
        if sts_values(record):
            for task, col in STS_COLUMNS.items():
                results.append(EvalResult(
                    task_type="sentence-similarity", task_name="Semantic Textual Similarity", dataset_type="senteval",
                    dataset_name=f"SentEval {col}", dataset_config=task, dataset_split="test",
                    dataset_args={"aggregation": "all", **({"sample_per_subset": sample} if sample else {})},
                    metric_type="spearmanr", metric_name="Spearman (cosine) x100",
                    metric_value=round(sts_values(record)[col], 4), **source))
        transfer = transfer_values(record)
        if transfer:
            evaluation, values = transfer
            split_sample = record["metrics"][evaluation].get("sample_per_split")
            for task, col in TRANSFER_COLUMNS.items():
                results.append(EvalResult(
                    task_type="text-classification", task_name="SentEval transfer (logistic regression)",
                    dataset_type="senteval", dataset_name=f"SentEval {task}", dataset_config=task,
                    dataset_split="test", dataset_args={"config": evaluation.removeprefix("transfer_"),
                                                        **({"sample_per_split": split_sample} if split_sample else {})},
                    metric_type="accuracy", metric_name="Accuracy", metric_value=round(values[col], 4), **source))
        for task, result in mteb_values(record).items():
            path = result["result"].get("dataset_revision")
            results.append(EvalResult(
                task_type=_mteb_type(task), task_name=f"MTEB {task}", dataset_type=_mteb_dataset(task),
                dataset_name=f"MTEB {task}", dataset_config="default", dataset_split=",".join(result["splits"]),
                dataset_revision=path, metric_type=result["main_score_name"], metric_name=result["main_score_name"],
                metric_value=round(100 * result["main_score"], 4), **source))
    elif run.summary:
        results.append(EvalResult(
            task_type="sentence-similarity", dataset_type="senteval", dataset_name="SentEval STSBenchmark",
            dataset_config="STSBenchmark", dataset_split="validation", metric_type="spearmanr",
            metric_name=f"{run.summary['metric']} (the dev metric that chose the checkpoint)",
            metric_value=round(run.summary["best"], 4)))
    chosen_license = license or base_license or "other"
    extra = {} if license or base_license else {"license_name": "unknown", "license_link": "LICENSE"}
    return ModelCardData(
        language=["en"], license=chosen_license, library_name="sentence-transformers" if kind ==
        "sentence-transformers" else "transformers", tags=tags, base_model=base if base else None,
        datasets=datasets or None, pipeline_tag="sentence-similarity", model_name=name,
        eval_results=results or None, **extra)


def _mteb_task(name: str):
    try:
        import mteb

        return mteb.get_task(name)
    except Exception:  # a task mteb's registry does not hold (one of the user's own)
        return None


def _mteb_type(name: str) -> str:
    task = _mteb_task(name)
    kind = task.metadata.type if task else ""
    return {"STS": "sentence-similarity", "Classification": "text-classification", "Clustering": "clustering",
            "Retrieval": "text-retrieval", "Reranking": "text-ranking", "PairClassification": "text-classification",
            "Summarization": "summarization"}.get(kind, "feature-extraction")


def _mteb_dataset(name: str) -> str:
    task = _mteb_task(name)
    return task.metadata.dataset["path"] if task else f"mteb/{name}"


def model_card(run: Run, kind: str, *, repo_id=None, license=None, refusal=None, difference=None,
               mteb_dir=None) -> str:
    """README.md: the front matter (card_data), then the body."""
    data = card_data(run, kind, repo_id, license)
    body = "\n".join(_body(run, kind, repo_id, data, refusal, difference, mteb_dir, license))
    return f"---\n{data.to_yaml()}\n---\n\n{body}\n"


def _licence_words(model: str, license: str | None) -> str:
    known = BASE_MODELS.get(model, (None, None))[1]
    if license:
        return f"{license} (given at publishing)"
    if known:
        return f"{known}, the base model's"
    return ("unknown: the base model states none (a random initialisation, or a model the kit does not know); "
            "give one with `cse-kit publish --license`")


def _body(run: Run, kind, repo_id, data, refusal, difference, mteb_dir, license=None):
    cite = citations()
    paper_key, baselines = method_papers(run.method)
    paper = method_words(run.method)
    record, config = run.record, run.config
    ref = repo_id or "path/to/this/folder"
    seed = config.get("seed")
    yield f"# {data.model_name}"
    yield ""
    if run.profile in NOT_PAPER_PROFILES:
        yield (f"> **Not {'the ' + paper + ' paper' if paper_key else 'a paper'}'s model.** A `{run.profile}`-profile run of cse-kit: {PROFILE_NOTES[run.profile]}. "
               f"Base model: {_base_words(config['model'])}; training data: {_data_words(config)}"
               + (f"; {record['train']['steps']} steps" if record else "") + (". Its numbers below are not "
               "comparable to the paper's, which are printed beside them for reference only." if paper_key else "."))
        yield ""
    what = f"{paper}"
    if paper_key in PAPERS:
        spec = paper_spec(paper_key)
        what = f"{paper} ({spec['title']}, {spec['venue']})"
    yield (f"A sentence encoder trained with cse-kit by " + (f"the {what} objective" if paper_key else what)
           + (f", preset `{run.preset}`" if run.preset else "") + f", seed {seed}. It maps a sentence to one "
           f"{_embed_dim(run.model_dir)}-dimensional vector; compare two with cosine similarity.")
    yield ""
    script = official_script(run)
    if script:
        yield f"Official-code variant: {script}."
        yield ""
    yield "## What was trained"
    yield ""
    yield "| | |"
    yield "|---|---|"
    field = VARIANT_FIELDS.get(run.method)
    rows = [("method", f"{run.method} ({paper})"), ("preset", f"`{run.preset}`"),
            ("profile", f"`{run.profile}`: {PROFILE_NOTES.get(run.profile, '')}"),
            ("variant", f"`{field}={config.get(field)}`" if field else "–"),
            ("base model", _base_words(config["model"])), ("training data", _data_words(config)),
            ("seed", str(seed)), ("pooler (the vector)", f"`{config.get('pooler')}`"),
            ("batch size, learning rate, epochs", f"{config.get('batch_size')}, {config.get('lr')}, "
                                                  f"{config.get('epochs')}"),
            ("max sequence length", str(config.get("max_seq_length"))),
            ("licence", _licence_words(config["model"], license))]
    if config.get("template"):
        rows.append(("template", f"`{config['template']}`"))
    for name, value in rows:
        yield f"| {name} | {value} |"
    own, profile = differences(run)
    yield ""
    yield (f"Settings that differ from the preset on the `{run.profile}` profile: "
           + (", ".join(f"`{k}={v!r}` (preset: {p!r})" for k, (v, p) in own.items()) if own else "none") + ".")
    if profile:
        yield ""
        yield (f"What the `{run.profile}` profile changes in the paper recipe: "
               + ", ".join(f"`{k}={v!r}` (paper: {p!r})" for k, (v, p) in profile.items()) + ".")
    yield ""
    yield from _results(run, paper)
    yield from _training(run)
    yield from _usage(run, kind, ref, refusal, difference)
    if mteb_dir:
        name = model_name(run, repo_id)
        yield "## MTEB"
        yield ""
        yield (f"`{mteb_dir}/` holds this model's MTEB results in the layout of MTEB's results repository "
               f"(`{name.replace('/', '__')}/{mteb_revision(run)}/`: `model_meta.json` and one JSON per task, as mteb "
               "wrote them; the revision is the record's key). A pull request to "
               "[embeddings-benchmark/results](https://github.com/embeddings-benchmark/results) copies it under "
               "`results/`" + (": first read the note at the top of this card." if run.profile in NOT_PAPER_PROFILES
                               else "."))
        yield ""
    yield "## Citation"
    yield ""
    if paper_key:
        yield f"The method, {paper}:"
        yield ""
        yield "```bibtex"
        yield cite[paper_key]["bibtex"]
        yield "```"
    else:
        yield (f"The method is {paper}, from no paper yet; the run's record holds the digest of its source "
               f"(`{(run.record or {}).get('method_source', 'not stored')}`).")
    if baselines:
        yield ""
        yield "Its baselines: " + ", ".join(cite[b]["paper"] for b in baselines) + "."
        yield ""
        yield "```bibtex"
        yield "\n\n".join(cite[b]["bibtex"] for b in baselines)
        yield "```"


def _results(run: Run, paper: str):
    record = run.record
    yield "## Results"
    yield ""
    if record is None:
        summary = run.summary
        yield (f"This run was trained outside a results store, so it has no test evaluation: its checkpoint is the "
               f"one with the best {summary['metric']} on the dev set, {summary['best']:.2f} at step "
               f"{summary['best_step']} of {summary['steps']}. Test it with `cse-kit eval --model {run.model_dir.name}"
               " --tasks all --mode test`, or train it through a notebook (the results store) to publish its test "
               "numbers.")
        yield ""
        return
    seeds = run.seeds
    n = len(seeds)
    if n > 1:
        yield (f"This model is seed {record['seed']}; \"over seeds\" is mean ± std (n − 1) over the {n} seeds of the "
               f"same configuration in the results store ({', '.join(str(r['seed']) for r in seeds)}), trained and "
               "evaluated by the same code.")
    else:
        yield (f"This model is seed {record['seed']}, the only seed of this configuration in the results store: no "
               "spread over seeds can be given (a notebook's `seeds` parameter trains more).")
    yield ""
    sts = sts_values(record)
    if sts:
        sample = record["metrics"]["sts_test"].get("sample_per_subset")
        where = paper_numbers(run.preset, "sts", run.method)
        yield ("**STS test** (Spearman correlation of cosine similarities ×100; SentEval, STS12-16 in the 'all' "
               "aggregation, as the papers)" + (f"; {sample} sampled pairs per subset (smoke profile)" if sample
                                                 else "") + ":")
        yield ""
        yield from _table(list(sts), sts, [sts_values(r) for r in seeds if sts_values(r)], where)
    transfer = transfer_values(record)
    if transfer:
        evaluation, values = transfer
        where = paper_numbers(run.preset, "transfer", run.method)
        yield (f"**Transfer test** (accuracy; SentEval's `{evaluation.removeprefix('transfer_')}` configuration)"
               + (f"; {record['metrics'][evaluation]['sample_per_split']} sampled records per split"
                  if record["metrics"][evaluation].get("sample_per_split") else "") + ":")
        yield ""
        others = [transfer_values(r)[1] for r in seeds if transfer_values(r) and transfer_values(r)[0] == evaluation]
        yield from _table(list(values), values, others, where)
    mteb = mteb_values(record)
    if mteb:
        yield "**MTEB** (main score ×100, mteb's own evaluation " + f"{next(iter(mteb.values()))['mteb_version']}):"
        yield ""
        several = len(run.seeds) > 1
        yield "| task | main score | this model |" + (" over seeds |" if several else "")
        yield "|---|---|---|" + ("---|" if several else "")
        for task, result in mteb.items():
            values = [100 * r["metrics"]["mteb"][task]["main_score"] for r in run.seeds
                      if task in r["metrics"].get("mteb", {})]
            yield (f"| {task} | {result['main_score_name']} | {100 * result['main_score']:.2f} |"
                   + (f" {_mean_std(values)} |" if several else ""))
        yield ""
    dev = record["train"]
    yield (f"The checkpoint is the one with the best {dev['metric']} on the dev set during training: "
           f"{dev['best']:.2f} at step {dev['best_step']} of {dev['steps']}.")
    yield ""
    if not (sts or transfer or mteb):
        yield "The record holds no test evaluation yet (a notebook or `cse-kit report` adds them)."
        yield ""


def _table(columns, values, by_seed, where):
    head = ["", *columns]
    yield "| " + " | ".join(head) + " |"
    yield "|" + "---|" * len(head)
    yield "| this model | " + " | ".join(_fmt(values[c]) for c in columns) + " |"
    if len(by_seed) > 1:
        yield "| over seeds | " + " | ".join(_mean_std([v[c] for v in by_seed]) for c in columns) + " |"
    if where:
        label, printed = where
        yield f"| paper | " + " | ".join(_fmt(printed.get(c)) for c in columns) + " |"
        yield ""
        yield f"The paper's numbers: {label}."
    yield ""


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s" if s < 600 else f"{s / 60:.1f} min"


def _training(run: Run):
    record = run.record
    env = (record or run.summary).get("environment", {})
    yield "## Training"
    yield ""
    if record:
        train, timings = record["train"], record["timings"]
        hardware = env.get("gpu") or f"CPU ({env.get('cpu', '?')}, {env.get('torch_threads', '?')} threads)"
        memory = train.get("peak_gpu_memory_bytes") or train.get("peak_rss_bytes")
        yield (f"{train['steps']} steps in {_seconds(timings.get('train_train_s', math.nan))} of training "
               f"({_seconds(timings.get('train_eval_s', 0))} of dev evaluation besides) on {hardware}, "
               f"{train['processes']} process{'es' if train['processes'] > 1 else ''}, precision "
               f"{train['mixed_precision']}" + (f", peak memory {memory / 2 ** 30:.2f} GiB "
                                                f"({'GPU' if train.get('peak_gpu_memory_bytes') else 'resident'})"
                                                if memory else "") + ".")
        yield ""
        yield "| provenance | |"
        yield "|---|---|"
        yield f"| cse-kit version | {env.get('cse_kit', '?')} |"
        yield f"| git commit | `{record.get('git_commit') or 'unknown (not a git checkout)'}` |"
        yield f"| code digest (the code that decides results) | `{record.get('code_version')}` |"
        yield f"| data checksums | `{record.get('data_checksums')}` |"
        yield f"| results-store record | `{record['key']}` ({record.get('created')}) |"
        yield (f"| software | Python {env.get('python')}, torch {env.get('torch')}, transformers "
               f"{env.get('transformers')} |")
        yield (f"| evaluation | {'under AMP autocast' if record.get('evaluation_amp') else 'fp32'} "
               "(the papers' protocol in fp32) |")
    else:
        summary = run.summary
        yield (f"{summary['steps']} steps in {summary['seconds']['train']:.0f} s on {env.get('gpu') or env.get('cpu')}"
               f", precision {summary.get('mixed_precision')}; cse-kit {env.get('cse_kit')}, torch {env.get('torch')},"
               f" transformers {env.get('transformers')}.")
    yield ""


def _usage(run: Run, kind: str, ref: str, refusal: str | None, difference: float | None):
    yield "## How to use"
    yield ""
    if kind == "sentence-transformers":
        yield (f"A sentence-transformers model (Transformer + {ST_POOLING[run.config['pooler']]} pooling), whose "
               f"vectors are the ones cse-kit evaluated (checked when it was published: largest difference "
               f"{difference:.1e} of the largest entry):")
        yield ""
        yield "```python"
        yield "from sentence_transformers import SentenceTransformer"
        yield ""
        yield f'model = SentenceTransformer("{ref}")'
        yield 'vectors = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])'
        yield "print(model.similarity(vectors[0:1], vectors[1:2]))"
        yield "```"
        yield ""
    else:
        yield (f"Not a sentence-transformers model ({refusal}): load it with cse-kit installed (its repository's README says how), which "
               "reads its pooler" + (", template" if run.config.get("template") else "")
               + " and any prefix or adapters from `cse_kit.json` and the files beside it:")
        yield ""
        yield "```python"
        if "/" in ref and not ref.startswith("path/"):
            yield "from huggingface_hub import snapshot_download"
        yield "from cse_kit.eval import Encoder"
        yield "from cse_kit.models import load_model"
        yield "from cse_kit.train.export import ExportSettings"
        yield ""
        yield (f'path = snapshot_download("{ref}")' if "/" in ref and not ref.startswith("path/")
               else f'path = "{ref}"')
        yield "settings = ExportSettings(path)"
        yield "tokenizer, model = load_model(path)"
        yield ("encoder = Encoder(model, tokenizer, settings.pooler, template=settings.prompt, "
               "max_length=settings.max_length)")
        yield 'vectors = encoder.encode(["A man is playing a guitar.", "Someone plays an instrument."])'
        yield "```"
        yield ""
    yield "Evaluate it as the papers did (STS and transfer tests, SentEval protocol), or on MTEB:"
    yield ""
    yield "```bash"
    yield f"cse-kit eval --model {ref} --tasks all --mode test"
    yield f"cse-kit eval --model {ref} --benchmark mteb"
    yield "```"
    yield ""


# --- the push ------------------------------------------------------------------------------------------------------
def push(folder, repo_id: str, *, private: bool = False) -> str:
    """Upload the published folder to the Hub's repository repo_id (created if missing) as one commit; returns the
    commit's URL. Without a token, offline or with the Hub unreachable: PublishError, nothing uploaded."""
    import httpx
    from huggingface_hub import CommitOperationAdd, HfApi, constants, get_token
    from huggingface_hub.errors import HfHubHTTPError

    from ..models import hub_unreachable, offline_mode

    folder = Path(folder)
    left = f"nothing was uploaded; the folder is {folder}"
    if offline_mode():
        raise PublishError(f"HF_HUB_OFFLINE=1 is set, so nothing can reach the Hub: unset it and push again ({left})")
    token = get_token()
    if not token:
        raise PublishError(f"no Hugging Face token: run `hf auth login` (a token with write access) or set HF_TOKEN, "
                           f"then push again ({left})")
    unreachable = hub_unreachable()
    if unreachable:
        raise PublishError(f"the Hub cannot be reached ({unreachable}): push again when it can (HF_ENDPOINT names "
                           f"another endpoint; {left})")
    api = HfApi(endpoint=constants.ENDPOINT, token=token)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    try:
        api.create_repo(repo_id, private=private or None, exist_ok=True)  # else the namespace's default
        info = api.create_commit(repo_id, [CommitOperationAdd(path_in_repo=p.relative_to(folder).as_posix(),
                                                              path_or_fileobj=str(p)) for p in files],
                                 commit_message=f"cse-kit publish: {folder.name}",
                                 commit_description="Model, model card (README.md) and results, written by "
                                                    "`cse-kit publish` from the run's results-store record.")
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else None
        fix = ("the token was refused: `hf auth login` with a token that can write to " + repo_id
               if status in (401, 403) else f"the Hub answered {status}")
        raise PublishError(f"{fix} ({str(err).splitlines()[0]}); {left}, not published") from None
    except (OSError, httpx.TransportError) as err:
        raise PublishError(f"the upload to {constants.ENDPOINT} broke off ({type(err).__name__}: {err}); the commit "
                           f"was not made, so nothing is published; push again ({left})") from None
    return info.commit_url


# --- from a notebook -----------------------------------------------------------------------------------------------
def commands(long, s, out: str = "published") -> list[str]:
    """The command that publishes each trained run of a notebook's table (the long table ex.run_rows returns; `s` its
    ex.setup), one line per (row, seed): `cse-kit publish KEY --results-dir ... --out <out>/<row>-seed<seed>`."""
    lines = []
    for line in long[long.status == "ok"].itertuples():
        record = _load(s.store.record_path(line.key), line.key)
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
