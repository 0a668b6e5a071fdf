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
# # DiffCSE Table 5: the BatchNorm projector
# STS-B dev Spearman and average transfer dev accuracy with DiffCSE's BatchNorm MLP projector vs SimCSE's
# Linear + tanh, for SimCSE and DiffCSE (BERT-base, the `diffcse-bert-sts` settings).

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

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(diffcse.table5_rows(), s, ("sts_dev", "transfer_dev"), ex.dev_columns)
comparison = ex.compare(long, 5, ["STS-B", "Avg. transfer"])
display(ex.show(comparison, "Table 5: BatchNorm on/off (dev), paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "Table 5: STS-B dev")

# %%
ex.save_table(s, "table5_batchnorm", "Table 5: BatchNorm projector (dev)", comparison, [figure])
