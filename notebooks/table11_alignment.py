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
# # DiffCSE Table 11: alignment and uniformity
# On STS-B test (Wang & Isola 2020; lower is better): alignment over pairs with gold score > 4 (SimCSE's rule,
# `positive_threshold` in `cse_kit.eval.geometry.align_uniform`; DiffCSE does not state its rule), uniformity
# over all distinct sentences; STS is the average STS test score of Table 1. "Avg. BERT-base" is the untrained
# backbone averaged over tokens as DiffCSE's evaluation.py does.

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
from cse_kit.papers import diffcse
from cse_kit.data.published import paper_table

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)
rows = diffcse.geometry_rows(s.profile)

# %%
long = ex.run_rows(rows, s, ("geometry", "sts_test"), ex.geometry_columns)
comparison = ex.compare(long, 11, ["Alignment", "Uniformity", "STS"])
display(ex.show(comparison, "Table 11: alignment, uniformity, STS, paper vs reproduced"))

# %%
ours = long[long.status == "ok"].groupby("row", sort=False)[["Alignment", "Uniformity"]].mean()
paper = paper_table(11)
figure = plots.align_uniform({k: tuple(v) for k, v in ours.iterrows()},
                             {k: (v["Alignment"], v["Uniformity"]) for k, v in paper.iterrows()})

# %%
ex.save_table(s, "table11_alignment", "Table 11: alignment and uniformity", comparison, [figure])
