# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %%

# %% [markdown]
# # All methods under one protocol
# Each paper compares its method with numbers copied from other papers: other seeds, other pipelines, one run. Here
# every method the kit has is trained by one engine on the same backbone, corpus, sequence length, evaluation and
# seeds, in two settings: **each paper's recipe** (its preset as published: the papers' notebooks' runs, reused) and
# **one shared recipe** (SimCSE's batch, learning rate, steps and STS-B dev selection for all: the objective is the
# only difference). STS test (7 tasks) and transfer test (on the paper profile; elsewhere on request), mean ± std and
# a 95% interval over the seeds, the paper's own number beside its recipe; whether each difference exceeds seed
# variance (a paired t-test over matched seeds, and a paired bootstrap over the STS test pairs within each seed); the
# cost of each method. Methods of your own (docs/extending.md) join as rows, trained on SimCSE's preset.
# DiffAug also reads NLI labels (its stage 1); the others train on Wiki1M alone.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: this comparison's (paper 5, mini 3, cpu 3, smoke 2: cse_kit.papers.comparison.SEEDS)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
methods: list = ["SimCSE", "ConSERT", "PromptBERT", "DiffCSE", "SCD", "ESimCSE", "DiffAug"]  # the methods compared
your_methods: list = []  # methods of your own (docs/extending.md), on SimCSE's preset; empty: every one $CSE_KIT_PLUGINS registers
recipes: list = ["paper recipe", "shared recipe"]  # each paper's preset as published, and one recipe for all
transfer: str = "auto"  # transfer evaluation: test, fasttest or none; auto: the profile's (test on paper, none on cpu, smoke)
mteb_tasks: str = ""  # MTEB tasks every run is also evaluated on through mteb (pip install -e '.[mteb]'): names, a benchmark name ('MTEB(eng, v2)') or default (a CPU selection); empty: the MTEB results the store has (cse-kit eval --benchmark mteb)
bootstrap_samples: int = 1000  # replicates of the paired bootstrap over the STS test pairs
level: float = 0.05  # significance level of both tests

# %%
from cse_kit import experiments as ex
from cse_kit.papers import comparison as cmp

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force, default_seeds=cmp.SEEDS)
methods = methods + (your_methods or cmp.own_methods())
cmp.check_methods(methods, recipes)
transfer_evaluation = cmp.transfer_evaluation(s.profile, transfer)

# %%
h = cmp.head_to_head(cmp.rows(s.profile, methods, recipes), s, recipes, transfer_evaluation, mteb_tasks,
                     bootstrap_samples, level)
cmp.show(h, level)
print("\n".join(h.words))

# %%
figures, front = cmp.figures(h, recipes[0])

# %%
ex.save_table(s, cmp.NOTEBOOK, cmp.TITLE, figures=figures, paper=None,
              notes=[*h.words, f"Pareto front ({recipes[0]}): {', '.join(front)}",
                     cmp.profile_note(s.profile, transfer_evaluation)],
              extra={"significance_level": level,  # what the matrices' * means, in their LaTeX and Markdown
                     "tables": {"scores": h.scores.to_dict("records"), "cost": h.costs.to_dict("records"),
                                **({"MTEB main scores": h.mteb.to_dict("records")} if len(h.mteb) else {}),
                                **{f"{recipe}: {name}": matrix.reset_index().to_dict("records")
                                   for recipe, matrices in h.tests.items() for name, matrix in matrices.items()}}})
