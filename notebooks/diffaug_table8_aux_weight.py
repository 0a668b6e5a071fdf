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
# # DiffAug Table 8: the auxiliary cross-entropy loss in stage 2
# STS-B dev Spearman (×100), semi-supervised BERT-base. "no aux loss" is the w/o-aux recipe (2000 stage-1 steps:
# the paper's 86.2 is Table 3's "Prefix (different)"); every α runs the w/-aux recipe (1500 stage-1 steps) with the
# stage-2 loss L_cl + α · L_ce on NLI batches (α = 1e-3 is Table 1's "w/ aux loss" run).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper | official-code
aux_weights: list = [None, 0.0001, 0.001, 0.01, 0.1]  # α of the paper's sweep; None: no auxiliary loss
aux_weight: float = None  # run only this α, e.g. -p aux_weight 0.001; None runs the sweep

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffaug

ex.check_parameters()

chosen = ex.sweep(aux_weights, aux_weight, "aux_weight")
diffaug.check_aux_weights(chosen)
diffaug.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(diffaug.table8_rows(chosen, recipe), s, ("sts_dev",), diffaug.stsb_dev_column)
comparison = ex.compare(long, 8, ["STS-B dev."], ex.sweep_cell("STS-B dev."), paper="diffaug")
display(ex.show(comparison, f"DiffAug Table 8: STS-B dev by α, paper vs reproduced (DiffAug recipe: {recipe})"))

# %%
figure = plots.sweep(comparison, "α (auxiliary loss weight)", "DiffAug Table 8: STS-B dev by α")

# %%
ex.save_table(s, "diffaug_table8_aux_weight", "DiffAug Table 8: auxiliary loss α (STS-B dev)", comparison, [figure],
              paper="diffaug", notes=[f"DiffAug recipe: {recipe}"])
