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
# # SCD Table 3: loss-term ablation
# BERT: the untrained backbone's [CLS], and SCD trained with the self-contrastive term only (`scd_terms=self_contrast`),
# the decorrelation term only (`decorrelation`) and both. STS is the mean of STS12-16 test, then STS-B and SICK-R
# test (Spearman ×100).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # SCD recipe: paper | official-code | released-checkpoints (the last two: BERT only)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import scd

ex.check_parameters()

scd.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(scd.table3_rows(s.profile, recipe), s, ("sts_test",), scd.table3_columns)
comparison = ex.compare(long, 3, ["STS", "STS-B", "SICK-R"], paper="scd")
display(ex.show(comparison, f"SCD Table 3: loss-term ablation, paper vs reproduced (SCD recipe: {recipe})"))

# %%
figure = plots.bars(comparison, "STS", "SCD Table 3: mean STS12-16 by loss terms")

# %%
ex.save_table(s, "scd_table3_ablation", "SCD Table 3: loss-term ablation", comparison, [figure], paper="scd",
              notes=[f"SCD recipe: {recipe}"])
