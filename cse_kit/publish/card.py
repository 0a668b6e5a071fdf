"""The model card, README.md: front matter that `huggingface_hub.ModelCard` reads (model-index with the record's
results), then what was trained, the results over seeds beside the paper's printed row, the training, how to load and
evaluate the model, and the BibTeX of its method's paper and baselines."""

from __future__ import annotations

import math

from ..data.published import PAPERS, paper_spec
from ..experiments import PROFILE_NOTES, STS_COLUMNS, TRANSFER_COLUMNS
from ..train.config import NOT_COMPUTING, OFFICIAL_VARIANTS, TrainConfig
from ..train.method_settings import former_layout, variant_field
from ..train.export import ST_POOLING
from ..train.presets import PRECISION_WORDS
from .mteb_results import embed_dim, mteb_revision
from .numbers import mteb_values, over_seeds, paper_numbers, sts_sample, sts_values, transfer_values
from .origins import BASE_MODELS, DATASETS, citations, declared_paper, method_papers, method_words
from .run import Run, model_name

#: the prefix of each method's own settings in TrainConfig
OWN_SETTINGS = {"generator": "diffcse", "mask_ratio": "diffcse", "lam": "diffcse", "scd_": "scd", "consert_": "consert",
                "esimcse_": "esimcse", "promptbert_": "promptbert", "diffaug_": "diffaug"}
#: smoke and cpu runs: not the papers' models
NOT_PAPER_PROFILES = ("smoke", "cpu", "mini", "mini-rehearsal")


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
    ignored = (*NOT_COMPUTING, "seed", "profile")  # what computes nothing, and what the card says apart
    config = {k: v for k, v in run.config.items() if k not in ignored}
    try:
        preset = former_layout(build_config(run.preset, run.profile, {"seed": run.config.get("seed", 42)}).to_dict())
        paper = former_layout(build_config(run.preset, "paper", {"seed": run.config.get("seed", 42)}).to_dict())
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

    if run.config.get(variant_field(run.method)) not in OFFICIAL_VARIANTS:
        return None
    try:
        return official_run(TrainConfig(**run.config))
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
        sample = sts_sample(record)
        sts = sts_values(record, run.data_dir)
        if sts:
            for task, col in STS_COLUMNS.items():
                results.append(EvalResult(
                    task_type="sentence-similarity", task_name="Semantic Textual Similarity", dataset_type="senteval",
                    dataset_name=f"SentEval {col}", dataset_config=task, dataset_split="test",
                    dataset_args={"aggregation": "all", **({"sample_per_subset": sample} if sample else {})},
                    metric_type="spearmanr", metric_name="Spearman (cosine) x100",
                    metric_value=round(sts[col], 4), **source))
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
    extra = {} if license or base_license else {"license_name": "unknown"}  # no LICENSE file: none is linked
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


def _shows_paper_numbers(run: Run) -> bool:
    """Whether the card prints a paper's row beside the run's numbers: its record's STS or transfer test, of a preset
    whose row the papers print."""
    record = run.record
    if record is None:
        return False
    return (sts_values(record, run.data_dir) is not None and paper_numbers(run.preset, "sts", run.method) is not None
            or transfer_values(record) is not None and paper_numbers(run.preset, "transfer", run.method) is not None)


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
        yield (f"> **Not {'the ' + paper + ' paper' if paper_key else 'a paper'}'s model.** A `{run.profile}`-profile "
               f"run of cse-kit: {PROFILE_NOTES[run.profile]}. "
               f"Base model: {_base_words(config['model'])}; training data: {_data_words(config)}"
               + (f"; {record['train']['steps']} steps" if record else "") + (
                   ". Its numbers are not comparable to the paper's" + (
                       ", which are printed beside them for reference only" if _shows_paper_numbers(run) else "")
                   if paper_key else "") + ".")
        yield ""
    what = f"{paper}"
    if paper_key in PAPERS:
        spec = paper_spec(paper_key)
        what = f"{paper} ({spec['title']}, {spec['venue']})"
    yield (f"A sentence encoder trained with cse-kit by " + (f"the {what} objective" if paper_key else what)
           + (f", preset `{run.preset}`" if run.preset else "") + f", seed {seed}. It maps a sentence to one "
           f"{embed_dim(run.model_dir)}-dimensional vector; compare two with cosine similarity.")
    yield ""
    script = official_script(run)
    if script:
        yield f"Official-code variant: {script}."
        yield ""
    yield "## What was trained"
    yield ""
    yield "| | |"
    yield "|---|---|"
    field = variant_field(run.method)
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
    yield from _results(run, ref)
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
        _, bibtex = declared_paper(run.method)
        yield f"The method is {paper}" + (", as its class cites it:" if bibtex else ", from no paper yet;") + " " + (
            f"its source's digest, as the run's {'record' if run.record else 'summary.json'} holds it: "
            f"`{run.method_source}`." if run.method_source else
            "the run's summary.json holds no digest of its source (trained before cse-kit stored it).")
        if bibtex:
            yield ""
            yield "```bibtex"
            yield bibtex.strip()
            yield "```"
    if baselines:
        yield ""
        yield "Its baselines: " + ", ".join(cite[b]["paper"] for b in baselines) + "."
        yield ""
        yield "```bibtex"
        yield "\n\n".join(cite[b]["bibtex"] for b in baselines)
        yield "```"


def _results(run: Run, ref: str):
    record = run.record
    yield "## Results"
    yield ""
    if record is None:
        summary = run.summary
        yield (f"This run was trained outside a results store, so it has no test evaluation: its checkpoint is the "
               f"one with the best {summary['metric']} on the dev set, {summary['best']:.2f} at step "
               f"{summary['best_step']} of {summary['steps']}. Test it with `cse-kit eval --model {ref}"
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
    sts = sts_values(record, run.data_dir)
    if sts:
        sample = sts_sample(record)
        where = paper_numbers(run.preset, "sts", run.method)
        yield ("**STS test** (Spearman correlation of cosine similarities ×100; SentEval, STS12-16 in the 'all' "
               "aggregation, as the papers)" + (f"; {sample} sampled pairs per subset (smoke profile)" if sample
                                                 else "") + ":")
        yield ""
        others = [values for r in seeds if sts_sample(r) == sample and (values := sts_values(r, run.data_dir))]
        yield from _table(list(sts), sts, others, where)
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


def _hardware(env: dict) -> str:
    """What a run trained on, from its environment: its GPU, else its CPU's model and threads."""
    cpu = env.get("cpu_model") or env.get("cpu", "?")
    return env.get("gpu") or f"a CPU ({cpu}, {env.get('torch_threads', '?')} threads)"


def _precision_words(used: str | None) -> str:
    """Accelerate's mixed_precision as the run trained in it, in words (fp32, bf16 autocast, fp16 autocast ...)."""
    return PRECISION_WORDS.get(used, "a precision its run folder does not record")


def _training(run: Run):
    record = run.record
    env = (record or run.summary).get("environment", {})
    yield "## Training"
    yield ""
    if record:
        train, timings = record["train"], record["timings"]
        memory = train.get("peak_gpu_memory_bytes") or train.get("peak_rss_bytes")
        yield (f"{train['steps']} steps in {_seconds(timings.get('train_train_s', math.nan))} of training "
               f"({_seconds(timings.get('train_eval_s', 0))} of dev evaluation besides) on {_hardware(env)}, "
               f"{train['processes']} process{'es' if train['processes'] > 1 else ''}, in "
               f"{_precision_words(train['mixed_precision'])}" + (f", peak memory {memory / 2 ** 30:.2f} GiB "
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
        yield (f"{summary['steps']} steps in {_seconds(summary['seconds']['train'])} on {_hardware(env)}, in "
               f"{_precision_words(summary.get('mixed_precision'))}; cse-kit {env.get('cse_kit')}, torch "
               f"{env.get('torch')}, transformers {env.get('transformers')}.")
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
        yield (f"Not a sentence-transformers model ({refusal}): load it with cse-kit installed (its repository's "
               "README says how), which "
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
