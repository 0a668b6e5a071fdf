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
# cost of each method.
# DiffAug also reads NLI labels (its stage 1); the others train on Wiki1M alone.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), cpu (all-MiniLM-L6-v2, offline), smoke (tiny models); auto: paper with a GPU
seeds: list = []  # training seeds; empty: this comparison's (paper 5, cpu 3, smoke 2: cse_kit.papers.comparison.SEEDS)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
methods: list = ["SimCSE", "ConSERT", "PromptBERT", "DiffCSE", "SCD", "ESimCSE", "DiffAug"]  # the methods compared
recipes: list = ["paper recipe", "shared recipe"]  # each paper's preset as published, and one recipe for all
transfer: str = "auto"  # transfer evaluation: test, fasttest or none; auto: the profile's (test on paper, none on cpu, smoke)
mteb_tasks: str = ""  # MTEB tasks every run is also evaluated on through mteb (pip install -e '.[mteb]'): names, a benchmark name ('MTEB(eng, v2)') or default (a CPU selection); empty: the MTEB results the store has (cse-kit eval --benchmark mteb)
bootstrap_samples: int = 1000  # replicates of the paired bootstrap over the STS test pairs
level: float = 0.05  # significance level of both tests

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import comparison as cmp

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force, default_seeds=cmp.SEEDS)
cmp.check_methods(methods, recipes)
transfer_evaluation = cmp.transfer_evaluation(s.profile, transfer)

# %%
rows = cmp.rows(s.profile, methods, recipes)
evals = cmp.evaluations(transfer_evaluation)
gold = cmp.gold(s.store.data_dir)
found = ex.records(rows, s, evals)
if mteb_tasks:
    cmp.evaluate_mteb(found, s.store, mteb_tasks)
long = cmp.with_mteb_average(ex.run_rows(rows, s, evals, cmp.columns(gold, transfer_evaluation)))
scores = cmp.summary(long)
display(ex.show_values(scores, "Average STS test and transfer test (and MTEB, where the runs have MTEB results) per "
                              "method and recipe: mean ± std, 95% interval over the seeds, the paper's own number "
                              "beside its recipe"))
mteb = cmp.mteb_table(long)
if len(mteb):
    display(ex.show_values(mteb, "MTEB main scores ×100 (mteb's own evaluation of the same vectors), mean over the "
                                 "seeds; Avg. MTEB over the tasks every such run has"))

# %%
tests, words = {}, []
for recipe in recipes:
    seed_tests = cmp.seed_tests(cmp.by_seed(long, recipe))
    boot = cmp.bootstrap_tests(cmp.similarities(found, recipe), gold, bootstrap_samples)
    tests[recipe] = {"paired t-test over seeds": cmp.significance_matrix(seed_tests, level),
                     "paired bootstrap over STS pairs": cmp.significance_matrix(boot, level)}
    for name, matrix in tests[recipe].items():
        display(ex.show_values(matrix, f"{recipe}: row − column average STS; * = beyond chance at {level} "
                                      f"({name})"))
    words += [f"{recipe}: {line}" for line in cmp.claims_in_words(seed_tests, level)]
print("\n".join(words))

# %%
costs = cmp.cost_table(long)
display(ex.show_values(costs, "Cost on this machine: median s/step, sentences/s, peak memory, the recipe's full run "
                             "projected over Wiki1M's 1M sentences, and the ratios to SimCSE"))

# %%
strip = plots.seed_strip(long, "Avg. STS", "Every seed's average STS test per method and recipe")
points = cmp.cost_points(scores, costs, recipes[0])
front = cmp.pareto_front(points)
frontier = plots.pareto(points, front, "projected hours for the full run (this machine)", "average STS test",
                        f"Average STS against training cost ({recipes[0]})")

# %%
ex.save_table(s, cmp.NOTEBOOK, cmp.TITLE, figures=[strip, frontier], paper=None,
              notes=[*words, f"Pareto front ({recipes[0]}): {', '.join(front)}",
                     cmp.profile_note(s.profile, transfer_evaluation)],
              extra={"tables": {"scores": scores.to_dict("records"), "cost": costs.to_dict("records"),
                                **({"MTEB main scores": mteb.to_dict("records")} if len(mteb) else {}),
                                **{f"{recipe}: {name}": matrix.reset_index().to_dict("records")
                                   for recipe, matrices in tests.items() for name, matrix in matrices.items()}}})
