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
# # ESimCSE Table 4: components
# STS-B dev Spearman (×100) on BERT-base: SimCSE (the paper quotes the official released model: on the paper
# profile it is evaluated beside our `simcse-bert` run), repetition without the momentum queue, the momentum queue
# without repetition, and ESimCSE (ours, and the authors' released checkpoint on the paper profile).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(esimcse.table4_rows(s.profile), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 4, ["STS-B"], paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 4: components, STS-B dev, paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "ESimCSE Table 4: STS-B dev by component")

# %%
ex.save_table(s, "esimcse_table4_components", "ESimCSE Table 4: components (STS-B dev)", comparison, [figure],
              paper="esimcse")
