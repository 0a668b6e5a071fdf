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

# %% [markdown]
# # Your method beside the four papers
# A method of your own (docs/extending.md: an `Objective` subclass registered with `@cse_kit.methods.register`)
# trained by the kit's engine on a base preset's data, model, schedule and evaluation, then compared with the
# papers' methods under one protocol: STS test over the seeds, mean ± std and 95% interval, whether each difference
# exceeds seed variance (paired t-test over seeds, paired bootstrap over the STS test pairs), and the cost. Editing
# your module recomputes your runs only; every other run is reused from the results store.

# %% tags=["parameters"]
plugin: str = ""  # the module that registers your method: a .py path or an import path; empty: examples/margin_simcse.py
method: str = "margin-simcse"  # its registered name
base_preset: str = "simcse-bert"  # the preset whose data, model, schedule and evaluation it trains with
options: dict = {"margin": 0.1}  # its options (the fields of its Options dataclass); empty: their defaults
compare_with: list = ["SimCSE", "DiffCSE", "SCD", "ESimCSE", "DiffAug"]  # the kit's methods beside it
recipes: list = ["paper recipe"]  # each preset as published; "shared recipe": one batch, lr and steps for all
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the head-to-head's (paper 5, mini 3, cpu 3, smoke 2)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
bootstrap_samples: int = 1000  # replicates of the paired bootstrap over the STS test pairs
level: float = 0.05  # significance level of both tests

# %%
from cse_kit import experiments as ex
from cse_kit.methods import use_plugins
from cse_kit.papers import comparison as cmp

ex.check_parameters()
use_plugins(plugin or cmp.EXAMPLE_PLUGIN)  # imported here, and by every worker or cluster job this notebook starts

s = ex.setup(profile, seeds, data_dir, results_dir, force, default_seeds=cmp.SEEDS)
methods = [*compare_with, method]
cmp.check_methods(methods, recipes)
own = {method: (base_preset, {"method": method, "method_options": options})}

# %%
h = cmp.head_to_head(cmp.rows(s.profile, methods, recipes, own), s, recipes, cmp.transfer_evaluation(s.profile),
                     bootstrap_samples=bootstrap_samples, level=level)
cmp.show(h, level)
print("\n".join(h.words))

# %%
figures, front = cmp.figures(h, recipes[0])
print(f"Pareto front ({recipes[0]}): {', '.join(front)}")
