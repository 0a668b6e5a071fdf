"""MTEB through the `mteb` package (2.x; `pip install -e '.[mteb]'`): the kit's own `cse_kit.eval.Encoder`, with
the pooler, template, prefix and adapters a model states in its cse_kit.json, wrapped as the encoder `mteb` expects,
so a model's MTEB score is computed on the same vectors as its SentEval score. `mteb` runs the tasks with its own
evaluation (its data, splits, classifiers and main scores); the kit only encodes.

Left out of the digest the results store keys every record by (cse_kit.results.OUTSIDE_RESULT_CODE): this module
changes no SentEval number; each MTEB result carries this module's own digest instead (`WRAPPER_DIGEST`). Imported
only when MTEB is asked for (`import mteb` takes ~6 s of CPU)."""

from __future__ import annotations

import re

import numpy as np

try:
    import mteb
    from mteb.models import ModelMeta
    from mteb.models.model_meta import ScoringFunction
    from mteb.models.abs_encoder import AbsEncoder
except ImportError:  # the optional extra
    raise ImportError("MTEB evaluation needs the mteb package: pip install -e '.[mteb]'") from None

from ..data import DataError
from ..environment import source_digest
from ..models import hub_unreachable, offline_mode

#: the full English benchmark (41 tasks; GPU hours: retrieval corpora of up to 2.4M texts)
FULL_ENGLISH = "MTEB(eng, v2)"
#: `--tasks default`: twelve tasks of MTEB(eng, v2) with short texts (about 100k texts, 5.1M characters by mteb's
#: statistics; STS22.v2's news articles and the retrieval corpora left out), taken as that benchmark filters them
#: (STS17: its English pair only): its STS tasks and one of each other kind. Estimated on 2 idle CPU cores from the
#: kit's encoding rate (docs/evaluation.md): about 5 min with all-MiniLM-L6-v2, about 20 min with a BERT-base model
CPU_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS17", "STSBenchmark", "SICK-R", "BIOSSES",
             "Banking77Classification", "AskUbuntuDupQuestions", "TwitterSemEval2015", "StackExchangeClustering.v2")
DEFAULT = "default"
#: the digest of this module, kept with each result: a stored MTEB result is reused only under the same wrapper
WRAPPER_DIGEST = source_digest(("eval/mteb_eval.py",))
#: a comma outside parentheses separates names ("MTEB(eng, v2)" is one)
_SEPARATOR = re.compile(r",(?![^()]*\))")


def version() -> str:
    return mteb.__version__


def resolve_tasks(spec: str) -> list:
    """mteb tasks of a comma-separated list of task names, benchmark names (their tasks) and `default` (CPU_TASKS),
    each task once. An unknown name is refused, with mteb's suggestion."""
    names = [part.strip() for part in _SEPARATOR.split(spec or DEFAULT) if part.strip()]
    tasks = {}
    for name in names:
        if name == DEFAULT:  # English subsets only, as MTEB(eng, v2) has them (building it takes seconds)
            found = list(mteb.get_tasks(tasks=list(CPU_TASKS), languages=["eng"], exclusive_language_filter=True))
        else:
            try:  # a task name first: mteb's get_benchmark builds every benchmark to suggest a name it lacks
                found = [mteb.get_task(name)]
            except KeyError as err:
                try:
                    found = list(mteb.get_benchmark(name).tasks)
                except (KeyError, ValueError):
                    raise ValueError(f"{name!r} is neither an MTEB task nor an MTEB benchmark "
                                     f"({str(err.args[0]).removeprefix('KeyError: ')}); `default` is "
                                     f"{', '.join(CPU_TASKS)}; the full English benchmark is "
                                     f"{FULL_ENGLISH!r}") from None
        tasks.update((task.metadata.name, task) for task in found)
    return list(tasks.values())


def input_limit(encoder) -> int:
    """The most tokens a sequence may have: the model's positions (after RoBERTa's padding offset and a DiffAug
    prefix, which shifts the positions) and its tokenizer's limit."""
    config = encoder.model.config
    offset = config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta") else 0
    positions = config.max_position_embeddings - offset - getattr(encoder.model, "prefix_length", 0)
    return min(positions, encoder.tokenizer.model_max_length)


def fit_text(tokenizer, text: str, budget: int) -> str:
    """text cut after its first `budget` tokens (no special tokens), at a character offset so that the cut text
    still is text (a template is filled with it); unchanged when it fits."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    keep = budget
    while keep < len(offsets):
        cut = text[:offsets[keep - 1][1]]
        if len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= budget:
            return cut
        keep -= 1  # a word cut in two may tokenize into more pieces: cut one token earlier
    return text


def fit_texts(tokenizer, texts: list[str], budget: int) -> list[str]:
    """Each text cut to `budget` tokens where it is longer (fit_text)."""
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    return [fit_text(tokenizer, text, budget) if n > budget else text for text, n in zip(texts, lengths)]


class KitEncoder(AbsEncoder):
    """The kit's Encoder as mteb's encoder: texts in, the Encoder's vectors out, cosine as the similarity. Texts
    longer than the model can take (MTEB's retrieval documents; never a SentEval sentence) are cut to fit, the
    template's words kept; mteb's instructions and prompt types are not used: a kit model has its own template."""

    def __init__(self, encoder, name: str):
        self.encoder = encoder
        limit = min(input_limit(encoder), encoder.max_length or input_limit(encoder))  # --max-length, if shorter
        self.budget = limit - (len(encoder.template) if encoder.template else 2)
        self.mteb_model_meta = ModelMeta.create_empty({
            "name": name, "revision": WRAPPER_DIGEST, "embed_dim": encoder.dim, "framework": ["PyTorch"],
            "similarity_fn_name": ScoringFunction.COSINE})

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs) -> np.ndarray:
        texts = fit_texts(self.encoder.tokenizer, [text for batch in inputs for text in batch["text"]], self.budget)
        try:
            return self.encoder.encode(texts)
        finally:
            self.encoder.clear()  # a retrieval corpus is not kept twice (the Encoder's cache and mteb's copy)


def check_data(tasks: list) -> None:
    """Offline (HF_HUB_OFFLINE=1), every task's data must load from the local cache: the first that does not is
    refused in one line naming it. Online with the Hub unreachable, refused before half a minute of retries per task."""
    if not offline_mode():
        unreachable = hub_unreachable()
        if unreachable:
            raise DataError(f"the Hugging Face Hub cannot be reached ({unreachable}), and mteb fetches each task's "
                            "data from it: set HF_HUB_OFFLINE=1 to evaluate the tasks already cached here")
        return
    for task in tasks:
        try:
            task.load_data()
        except (OSError, ValueError) as err:  # datasets: ConnectionError (offline), FileNotFoundError, ...
            data = task.metadata.dataset
            raise DataError(f"MTEB task {task.metadata.name}: its data (Hub dataset {data['path']}, revision "
                            f"{data.get('revision')}) are not cached here and offline mode is on (HF_HUB_OFFLINE=1; "
                            f"{type(err).__name__}): run it once with internet to cache them, or leave it out of "
                            "--tasks") from None
        task.unload_data()


def evaluate_task(model: KitEncoder, task, batch_size: int = 128) -> dict:
    """One task through mteb's own evaluation: {mteb_version, revision, main_score_name, main_score (mteb's: the
    mean over the evaluated splits and subsets, 0-1), splits: {split: {subset: main score}}, seconds, wrapper,
    encoding, result: mteb's full TaskResult as JSON}."""
    result = mteb.evaluate(model, task, cache=None, overwrite_strategy="always", co2_tracker=False,
                           show_progress_bar=False, encode_kwargs={"batch_size": batch_size})
    task_result = result.task_results[0]
    if task.data_loaded:
        task.unload_data()
    return {"mteb_version": task_result.mteb_version, "revision": task_result.dataset_revision,
            "main_score_name": task.metadata.main_score, "main_score": float(task_result.get_score()),
            "splits": {split: {s["hf_subset"]: float(s["main_score"]) for s in scores}
                       for split, scores in task_result.scores.items()},
            "seconds": task_result.evaluation_time, "wrapper": WRAPPER_DIGEST, "encoding": encoding(model.encoder),
            "result": task_result.model_dump(mode="json")}


def encoding(encoder) -> dict:
    """What of an Encoder beyond its model and pooler changes the vectors: its template and AMP."""
    return {"template": encoder.template.text if encoder.template else None, "amp": encoder.amp}


def is_current(stored: dict | None, task, encoder) -> bool:
    """Whether a stored result is this task's under this mteb version, data revision, wrapper and encoding."""
    return bool(stored) and (stored["mteb_version"], stored["revision"], stored["wrapper"], stored["encoding"]) == (
        version(), task.metadata.revision, WRAPPER_DIGEST, encoding(encoder))


def evaluate_tasks(encoder, name: str, tasks: list, stored: dict, *, force: bool = False):
    """(task name, result) for each task without a current result in stored (by task name; every task if force),
    one task at a time through mteb, once every such task's data are known to be readable (check_data): the caller
    keeps each result as it comes, so an interrupted run keeps the tasks it finished. name: the model's, for mteb."""
    todo = [task for task in tasks if force or not is_current(stored.get(task.metadata.name), task, encoder)]
    check_data(todo)
    model = KitEncoder(encoder, name) if todo else None
    for task in todo:
        yield task.metadata.name, evaluate_task(model, task)


def format_table(results: dict) -> str:
    """task | splits | main score name | main score ×100 (2 decimals), and the average of the main scores."""
    width = max([len(name) for name in results] + [4])
    lines = [f"{'task':<{width}}  {'splits':<16}  {'main score':<28}  x100"]
    for name, r in results.items():
        lines.append(f"{name:<{width}}  {','.join(r['splits']):<16}  {r['main_score_name']:<28}  "
                     f"{100 * r['main_score']:.2f}")
    if results:
        lines.append(f"{'Avg.':<{width}}  {'':<16}  {'':<28}  "
                     f"{100 * float(np.mean([r['main_score'] for r in results.values()])):.2f}")
    return "\n".join(lines)
