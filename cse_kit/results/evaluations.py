"""The evaluations a record can hold, by name (EVALUATIONS), each fn(encoder, data_dir, the subject's profile) ->
metrics, and which of them share their encodings (SHARED_ENCODINGS)."""

from __future__ import annotations

from ..eval.user_tasks import UserTask, evaluate_user_task
from .identity import evaluation_sample


def _sts(mode: str):
    def run(encoder, data_dir, profile):
        from ..eval.runner import evaluate

        if mode != "test":  # STS-B and SICK-R dev whole: what the training's dev evaluation selects on
            return evaluate(encoder, ("STSBenchmark", "SICKRelatedness"), mode, data_dir)["sts"]
        sample = evaluation_sample(profile, "sts_sample")
        result = evaluate(encoder, "sts", mode, data_dir, sts_sample=sample)["sts"]
        return {**result, **({"sample_per_subset": sample} if sample else {})}
    return run


def _transfer(mode: str):
    def run(encoder, data_dir, profile):
        from ..eval.runner import evaluate

        sample = evaluation_sample(profile, "transfer_sample")
        result = evaluate(encoder, "transfer", mode, data_dir, transfer_sample=sample)["transfer"]
        return {**result, "mode": mode, **({"sample_per_split": sample} if sample else {})}
    return run


def _geometry(encoder, data_dir, profile) -> dict:
    from ..data import load_sts
    from ..eval.geometry import align_uniform, nearest, retrieval_recall, similarity_by_gold_bin
    from ..data.published import paper_examples

    queries = paper_examples(9)["queries"]
    pool = list(dict.fromkeys(s for p in load_sts("STSBenchmark", "test", data_dir) for s in (p.sent1, p.sent2)))
    return {"align_uniform": align_uniform(encoder, data_dir), "gold_bins": similarity_by_gold_bin(encoder, data_dir),
            "retrieval": retrieval_recall(encoder, data_dir),
            "nearest": {q: found for q, found in zip(queries, nearest(encoder, queries, pool))}}


def _sts_pairs(encoder, data_dir, profile) -> dict:
    from ..eval.sts import test_similarities

    return test_similarities(encoder, data_dir)


def _geometry_sts_filter(encoder, data_dir, profile) -> dict:
    from ..eval.geometry import sts_filter_align_uniform

    return {"align_uniform": sts_filter_align_uniform(encoder, data_dir)}


def _user_task(task: UserTask):
    """A researcher's task as an EVALUATIONS function."""
    return lambda encoder, data_dir, profile: evaluate_user_task(encoder, task)


def evaluation_name(evaluation) -> str:
    """An evaluation's name in a record's metrics (a researcher's task's holds its file's checksum)."""
    return evaluation.evaluation if isinstance(evaluation, UserTask) else evaluation


#: evaluation -> the evaluations that read no sentence it does not: computed with it, from its encodings, where it
#: reads whole sets (a notebook's STS test numbers, then the head-to-head's per-pair cosines of the same pairs; not
#: the other way: the STS test also reads STS-B's and SICK-R's dev sets, which the head-to-head never needs, and the
#: report runs the head-to-head last)
SHARED_ENCODINGS = {"sts_test": ("sts_pairs",)}


def with_shared_encodings(missing: list[str], record: dict) -> list[str]:
    """`missing` and, where its profile evaluates the STS test sets whole, every SHARED_ENCODINGS companion the record
    lacks: one encoder computes them all, each sentence encoded once (a sampled STS test, smoke's, would have to
    encode the rest of the sets for them)."""
    if evaluation_sample(record.get("profile"), "sts_sample") is not None:
        return missing
    extra = [c for name in missing for c in SHARED_ENCODINGS.get(name, ())
             if c not in record["metrics"] and c not in missing]
    return missing + list(dict.fromkeys(extra))


#: name -> fn(encoder, data_dir, the subject's profile) -> metrics. `geometry_sts_filter`: SCD Figure 2's alignment and uniformity, computed
#: as SCD's official sts_filter.py does (beside `geometry`'s Wang & Isola definitions); `sts_pairs`: every STS test
#: pair's cosine, for the paired bootstrap of cse_kit.papers.comparison
EVALUATIONS = {"sts_test": _sts("test"), "sts_dev": _sts("dev"), "transfer_dev": _transfer("dev"),
               "transfer_fasttest": _transfer("fasttest"), "transfer_test": _transfer("test"), "geometry": _geometry,
               "geometry_sts_filter": _geometry_sts_filter, "sts_pairs": _sts_pairs}
