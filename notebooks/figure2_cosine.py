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
# # DiffCSE Figure 2: cosine similarity by gold-score group
# Cosine similarity of every STS-B test pair, grouped by human rating into [0,1), [1,2), [2,3), [3,4), [4,5]
# (the paper does not give its bin edges), for SimCSE and DiffCSE (BERT-base, first seed). The paper's finding:
# both order the groups as humans do; DiffCSE gives slightly higher similarities within a group.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists

# %%
import pandas as pd
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)
rows = [r for r in diffcse.geometry_rows(s.profile) if r.preset]

# %%
found = ex.records(rows, s, ("geometry",))
bins = {label: recs[0]["metrics"]["geometry"]["gold_bins"] for label, recs in found.items()}
means = pd.DataFrame({label: {b: v["mean"] for b, v in groups.items()} for label, groups in bins.items()})
means = means.rename_axis("gold score").reset_index()
display(ex.show_values(means, "mean cosine similarity per gold-score group", together=True))

# %%
figure = plots.gold_bins(bins)

# %%
ex.save_table(s, "figure2_cosine", "Figure 2: cosine similarity by gold-score group", None, [figure],
              extra={"tables": {"mean cosine similarity per gold-score group": means.to_dict("records")}})
