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
# # DiffCSE Table 1: STS test
# Spearman (×100) on STS12-16 (`all` aggregation), STS-B and SICK-R test, SimCSE as the DiffCSE authors
# reproduced it and DiffCSE's STS models (`simcse-*`, `diffcse-*-sts` presets), `cls_before_pooler` at test.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
backbones: list = ["bert", "roberta"]  # encoders of the table (RoBERTa runs on the paper profile only)
backbone: str = None  # run only this backbone, e.g. -p backbone bert; None runs both

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(backbones, backbone, "backbone")
ex.check(set(chosen) <= set(diffcse.BACKBONE_LABELS), f"backbones are {list(diffcse.BACKBONE_LABELS)}, got {chosen}")
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
columns = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
long = ex.run_rows(diffcse.table1_rows(chosen, s.profile), s, ("sts_test",), ex.sts_test_columns)
comparison = ex.compare(long, 1, columns)
display(ex.show(comparison, "Table 1: STS test Spearman, paper vs reproduced"))

# %%
figure = plots.bars(comparison, "Avg.", "Table 1: average STS test")

# %%
ex.save_table(s, "table1_sts", "Table 1: STS test", comparison, [figure])
