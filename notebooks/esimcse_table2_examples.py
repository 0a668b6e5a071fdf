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
# # ESimCSE Table 2: similarity of edited sentences to the original
# Cosine similarity to "I like this apple because it looks so fresh and it should be delicious." of the paper's
# edits of it: random insertion, random deletion and two word repetitions (the original itself: 1). The paper does
# not name the model that scored them (§1; our inference: SimCSE-BERT-base); we score them with our
# `simcse-bert` and `esimcse-bert` runs and, on the paper profile, the released SimCSE and ESimCSE checkpoints,
# each column beside the paper's number. Δ is green within ±0.05.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.papers import esimcse

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = esimcse.table2_long(esimcse.model_rows(s.profile), s)
comparison = esimcse.table2_comparison(long)
display(ex.show(comparison, "ESimCSE Table 2: cosine similarity to the original sentence, paper vs each model"))

# %%
ex.save_table(s, "esimcse_table2_examples", "ESimCSE Table 2: edited sentences", comparison, paper="esimcse",
              notes=["the paper does not name its model: every column is compared with the same printed numbers"])
