"""What each notebook of the report asks for (NEEDS), for `cse-kit report --plan` (cse_kit.report.plan): its
run_rows / records calls written out with the same row builders the notebook calls (cse_kit.papers.*), its
parameters' defaults read from its `parameters` cell (notebook_defaults). Known before the notebooks run only as
estimates, and said so: DiffAug's `_joint` alpha (chosen on STS-B dev: counted at the first grid point until the store
holds every candidate) and the equal-budget studies' trials and chosen configurations (the recipe's steps; trials a
study already holds are read from it)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .checkout import NOTEBOOK_DIR


@dataclass
class Need:
    """One call of a notebook that asks the results store for runs (run_rows, records): `rows` over `seeds` (None:
    the profile's report seeds), each evaluated with `evals`, with the rows' untrained starts where the profile shows
    them (`starts`). The notebook waits for a call's runs before it goes on (its pending runs go to the workers
    together: results.parallel.compute_all). `unknown`: runs whose keys only the notebook's run decides (a study's
    trials): (label, a run of the same steps, how many)."""

    rows: list
    evals: tuple
    seeds: list | None = None
    starts: bool = True
    unknown: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    runs: list = field(default_factory=list)  # (label, subject) of runs known otherwise than by a row: held trials


@dataclass
class Context:
    profile: str
    params: dict  # the notebook's parameters as the report runs it (their defaults)
    setup: object  # an experiments.Setup: the profile, the report's seeds, the results store, the cluster


def notebook_defaults(name: str) -> dict:
    """The notebook's parameters as the report runs it: the literal values of its `parameters` cell."""
    nb = json.loads((NOTEBOOK_DIR / f"{name}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            out = {}
            for node in ast.parse("".join(cell["source"])).body:
                target = node.target if isinstance(node, ast.AnnAssign) else \
                    node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
                if isinstance(target, ast.Name) and node.value is not None:
                    out[target.id] = ast.literal_eval(node.value)
            return out
    raise ValueError(f"notebook {name} has no `parameters` cell")


def _sweep(p: dict, values: str, one: str) -> list:
    from ..experiments import sweep

    return sweep(p[values], p.get(one) or None, one)


def _diffcse(fn: Callable) -> Callable:
    def needs(c: Context) -> list[Need]:
        from ..papers import diffcse

        return fn(c, diffcse)
    return needs


def _paper(module: str, fn: Callable) -> Callable:
    def needs(c: Context) -> list[Need]:
        import importlib

        return fn(c, importlib.import_module(f"cse_kit.papers.{module}"))
    return needs


def _transfer(profile: str) -> str:
    from ..experiments import transfer_eval

    return transfer_eval(profile)


def _geometry_trained(c: Context, m) -> list:
    return [r for r in m.geometry_rows(c.profile) if r.preset]


def _joint_alpha(candidates: list, groups: dict, c: Context, notes: list) -> dict:
    """DiffAug Tables 2 and 7's `_joint` α: chosen on STS-B dev as the notebook chooses it (experiments.best_on_dev)
    where the store holds every candidate's dev score; else each group's first grid point (the α does not change a
    run's steps; its key, and so whether the store holds it, is known once the candidates finished)."""
    import pandas as pd

    from ..experiments import best_on_dev
    from ..experiments.rows import plan_rows
    from ..papers import diffaug

    s, lines = c.setup, []
    complete = True
    for row, subjects, unavailable in plan_rows(candidates, s):
        for seed, subject in subjects:
            key = s.store.key(subject)
            if s.store.has_key(key, ("sts_dev",)):
                lines.append({"row": row.label, "seed": seed, "status": "ok",
                              **diffaug.stsb_dev_column(s.store.read(key))})
            else:
                complete = False
    if complete and lines:
        _, chosen = best_on_dev(pd.DataFrame(lines), groups, diffaug.DEV_COLUMN)
    else:
        chosen = {group: labels[0] for group, labels in groups.items()}
        notes.append("the `_joint` rows' α is chosen on STS-B dev once their candidates finished: counted at "
                     + ", ".join(f"{group} {diffaug.alpha_of({group: label})[group]:g}"
                                 for group, label in chosen.items()))
    return diffaug.alpha_of(chosen)


def _diffaug_fractions(c: Context, m) -> list[Need]:
    p, out = c.params, []
    n_subsets = m.label_subsets(c.profile, p["subsets"])
    for b in _sweep(p, "backbones", "backbone"):
        candidates, groups = m.joint_selection_rows(b, c.profile, p["alphas"])
        out.append(Need(candidates, ("sts_dev", "sts_test")))
        notes: list = []
        alpha = _joint_alpha(candidates, groups, c, notes)
        out.append(Need(m.unsupervised_rows(b), ("sts_test",), notes=notes))
        out += [Need(m.fraction_rows(b, f, n_subsets, c.profile, p["recipe"], alpha), ("sts_test",))
                for f in _sweep(p, "fractions", "fraction")]
    return out


def _diffaug_figure3(c: Context, m) -> list[Need]:
    p = c.params
    grid = m.stage1_grid(c.profile, [])
    length = p["stage1_steps"] or max(grid)
    every = p["snapshot_steps"] or m.snapshot_every(grid)
    return [Need(m.figure5_rows([length], every, p["recipe"]), ("sts_dev",), starts=False)]


def _diffaug_figure5(c: Context, m) -> list[Need]:
    p = c.params
    grid = m.stage1_grid(c.profile, p["stage1_steps"])
    every = p["snapshot_steps"] or m.snapshot_every(grid)
    return [Need(m.figure5_rows(grid, every, p["recipe"]), ("sts_dev",), starts=False)]


def _methods(p: dict) -> list:
    from ..papers import comparison as cmp

    return list(p["methods"]) + [m for m in (p.get("your_methods") or cmp.own_methods()) if m not in p["methods"]]


def _compare_methods(c: Context, cmp) -> list[Need]:
    p = c.params
    evals = cmp.evaluations(cmp.transfer_evaluation(c.profile, p["transfer"]))
    return [Need(cmp.rows(c.profile, _methods(p), p["recipes"]), evals, seeds=list(cmp.SEEDS[c.profile]))]


def _study_trials(study) -> list[dict]:
    """The trials a study already holds (its storage beside the results store), read without creating anything;
    none where it has not started."""
    from ..tune.space import quiet_optuna
    from ..tune.study import DEFAULT_STORAGE

    path = Path(study.root()) / DEFAULT_STORAGE
    if study.storage is None and not path.is_file():
        return []
    try:
        import optuna

        quiet_optuna()
        found = optuna.load_study(study_name=study.name, storage=study.storage_url())
    except Exception:  # no such study yet, or a storage that does not answer: nothing held
        return []
    return [{"state": t.state.name.lower(), "key": t.user_attrs.get("key"), "value": t.value, "params": t.params,
             "number": t.number} for t in found.get_trials(deepcopy=False)]


def _equal_budget(c: Context, eb) -> list[Need]:
    from ..papers import comparison as cmp
    from ..tune import chosen

    p, s = c.params, c.setup
    seeds = list(cmp.SEEDS[c.profile])
    methods = _methods(p)
    trials = p["trials"] or eb.TRIALS[c.profile]
    studies = {m: eb.study_of(m, c.profile, p["space"].get(m) or eb.default_space(m, c.profile), trials, seeds[0],
                              s.store) for m in methods}
    unknown, chosen_rows, notes, trial_runs = [], [], [], []
    for method, study in studies.items():
        held = _study_trials(study)
        complete = [t for t in held if t["state"] == "complete"]
        trial_runs += [(f"{cmp.label(method, eb.RECIPE)}: trial {t['number']}", study.config(t["params"]))
                       for t in complete[:trials]]
        recipe = study.config({})
        if len(complete) < trials:
            unknown.append((f"{cmp.label(method, eb.RECIPE)}: trial", recipe, trials - len(complete)))
        if len(complete) >= trials:  # the study is done: its chosen configuration's runs are known
            chosen_rows.append(eb.StudyRow(cmp.label(method, eb.RECIPE), study.preset, study=study,
                                           params=chosen(held)["params"]))
        else:  # its first seed's run is the winning trial itself
            unknown.append((f"{cmp.label(method, eb.RECIPE)}: chosen configuration", recipe, len(seeds) - 1))
    if unknown:
        notes.append("the studies' trials and chosen configurations are counted at their recipe's steps (their "
                     "settings are drawn as the study runs; a pruned trial stops early)")
    evals = cmp.evaluations(cmp.transfer_evaluation(c.profile))
    return [Need([], (), seeds=seeds, unknown=[u for u in unknown if u[0].endswith("trial")], notes=notes,
                 runs=trial_runs),
            Need(cmp.rows(c.profile, methods, [eb.PAPER_RECIPE]) + chosen_rows, evals, seeds=seeds,
                 unknown=[u for u in unknown if not u[0].endswith("trial")])]


#: notebook -> its calls that ask for runs, as its cells make them (docs/notebooks.md). A notebook the report runs
#: that is missing here is refused by plan(): written out here with the notebook, or the bill would leave it out.
NEEDS: dict[str, Callable[[Context], list[Need]]] = {
    # DiffCSE
    "table1_sts": _diffcse(lambda c, m: [Need(m.table1_rows(_sweep(c.params, "backbones", "backbone"), c.profile),
                                              ("sts_test",))]),
    "table2_transfer": _diffcse(lambda c, m: [Need(m.table2_rows(_sweep(c.params, "backbones", "backbone"),
                                                                 c.profile), (_transfer(c.profile),))]),
    "table3_objective": _diffcse(lambda c, m: [Need(m.table3_rows(_sweep(c.params, "variants", "variant")),
                                                    m.ABLATION_EVALS[c.profile])]),
    "table4_augmentation": _diffcse(lambda c, m: [Need(m.table4_rows(_sweep(c.params, "edits", "edit")),
                                                       m.ABLATION_EVALS[c.profile])]),
    "table5_batchnorm": _diffcse(lambda c, m: [Need(m.table5_rows(), ("sts_dev", "transfer_dev"))]),
    "table6_generator": _diffcse(lambda c, m: [Need(m.table6_rows(_sweep(c.params, "generators", "generator"),
                                                                  c.profile), ("sts_dev", "transfer_dev"))]),
    "table7_mask_ratio": _diffcse(lambda c, m: [Need(m.table7_rows(_sweep(c.params, "mask_ratios", "mask_ratio")),
                                                     ("sts_dev",))]),
    "table8_lambda": _diffcse(lambda c, m: [Need(m.table8_rows(_sweep(c.params, "lams", "lam")), ("sts_dev",))]),
    "table9_10_retrieval": _diffcse(lambda c, m: [Need(_geometry_trained(c, m), ("geometry",))]),
    "table11_alignment": _diffcse(lambda c, m: [Need(m.geometry_rows(c.profile), ("geometry", "sts_test"))]),
    "figure2_cosine": _diffcse(lambda c, m: [Need(_geometry_trained(c, m), ("geometry",), starts=False)]),
    "table12_14_hparams": lambda c: [],  # the presets' values and parameter counts: nothing trained
    "table15_pos_neg": _diffcse(lambda c, m: [Need(m.table15_rows(c.params["roles"], c.params["edits"]),
                                                   m.ABLATION_EVALS[c.profile])]),
    # SCD
    "scd_table1_sts": _paper("scd", lambda c, m: [Need(m.table1_rows(_sweep(c.params, "backbones", "backbone"),
                                                                     c.profile, c.params["recipe"]), ("sts_test",))]),
    "scd_table2_transfer": _paper("scd", lambda c, m: [Need(m.table2_rows(_sweep(c.params, "backbones", "backbone"),
                                                                          c.profile, c.params["recipe"]),
                                                            (_transfer(c.profile),))]),
    "scd_table3_ablation": _paper("scd", lambda c, m: [Need(m.table3_rows(c.profile, c.params["recipe"]),
                                                            ("sts_test",))]),
    "scd_figure2_alignment": _paper("scd", lambda c, m: [Need(m.figure2_rows(c.profile, c.params["recipe"]),
                                                              (m.GEOMETRIES[c.params["geometry"]], "sts_test"))]),
    # ESimCSE
    "esimcse_table1_7_length_bias": _paper("esimcse", lambda c, m: [Need(m.model_rows(c.profile), ())]),
    "esimcse_table2_examples": _paper("esimcse", lambda c, m: [Need(m.model_rows(c.profile), ())]),
    "esimcse_table3_sts": _paper("esimcse", lambda c, m: [Need(m.table3_rows(
        _sweep(c.params, "backbones", "backbone"), c.profile), ("sts_test",))]),
    "esimcse_table4_components": _paper("esimcse", lambda c, m: [Need(m.table4_rows(c.profile), ("sts_dev",))]),
    "esimcse_table5_extension": _paper("esimcse", lambda c, m: [Need(m.table5_rows(
        _sweep(c.params, "extensions", "extension")), ("sts_dev",))]),
    "esimcse_table6_bucketing": _paper("esimcse", lambda c, m: [Need(m.table6_rows(
        [str(b) for b in _sweep(c.params, "buckets", "bucket")]), ("sts_dev",))]),
    "esimcse_table8_new_bias": _paper("esimcse", lambda c, m: [Need(m.model_rows(c.profile), ())]),
    "esimcse_table9_dup_rate": _paper("esimcse", lambda c, m: [Need(m.table9_rows(
        _sweep(c.params, "dup_rates", "dup_rate")), ("sts_dev",))]),
    "esimcse_table10_queue": _paper("esimcse", lambda c, m: [Need(m.table10_rows(
        _sweep(c.params, "queue_factors", "queue_factor"), c.profile), ("sts_dev",))]),
    "esimcse_table11_transfer": _paper("esimcse", lambda c, m: [Need(m.table11_rows(c.profile),
                                                                     (_transfer(c.profile),))]),
    # DiffAug
    "diffaug_figure3_dynamics": _paper("diffaug", _diffaug_figure3),
    "diffaug_table1_sts": _paper("diffaug", lambda c, m: [Need(m.table1_rows(c.profile, c.params["recipe"],
                                                                             c.params["alphas"])[0],
                                                               ("sts_dev", "sts_test"))]),
    "diffaug_table2_7_label_fraction": _paper("diffaug", _diffaug_fractions),
    "diffaug_table3_modules": _paper("diffaug", lambda c, m: [Need(m.table3_rows(c.params["recipe"]), ("sts_dev",))]),
    "diffaug_table4_cost": _paper("diffaug", lambda c, m: [Need(m.cost_rows(c.profile, c.params["window"] or None),
                                                                ("sts_dev",), starts=False)]),
    "diffaug_table5_hparams": lambda c: [],  # the presets' values: nothing trained
    "diffaug_table6_semi_baselines": _paper("diffaug", lambda c, m: [Need(m.table6_rows(
        m.alpha_grid(c.profile, c.params["alphas"]), c.params["strategies"], c.params["baselines"])[0],
        ("sts_dev", "sts_test"))]),
    "diffaug_table8_aux_weight": _paper("diffaug", lambda c, m: [Need(m.table8_rows(
        _sweep(c.params, "aux_weights", "aux_weight"), c.params["recipe"]), ("sts_dev",))]),
    "diffaug_figure4_prefix_length": _paper("diffaug", lambda c, m: [Need(m.figure4_rows(
        m.prefix_grid(c.profile, c.params["lengths"]), c.params["recipe"]), ("sts_dev",))]),
    "diffaug_figure5_stage1_steps": _paper("diffaug", _diffaug_figure5),
    # every method under one protocol
    "compare_methods": _paper("comparison", _compare_methods),
    "equal_budget": _paper("equal_budget", _equal_budget),
}
