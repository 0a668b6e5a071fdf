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
# # ESimCSE Table 11: transfer tasks
# Accuracy on the seven SentEval transfer tasks (SentEval's `test` configuration; `fasttest` on smoke) of SimCSE
# and ESimCSE on BERT-base: our `simcse-bert` / `esimcse-bert` runs and, on the paper profile, the released
# checkpoints (the paper's SimCSE row is Gao et al.'s published model).

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
columns = ["MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "Avg."]
long = ex.run_rows(esimcse.table11_rows(s.profile), s, (ex.transfer_eval(s.profile),), ex.transfer_test_columns)
comparison = ex.compare(long, 11, columns, paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 11: transfer accuracy, paper vs reproduced"))

# %%
figure = plots.bars(comparison[comparison.n > 0], "Avg.", "ESimCSE Table 11: average transfer accuracy")

# %%
ex.save_table(s, "esimcse_table11_transfer", "ESimCSE Table 11: transfer", comparison, [figure], paper="esimcse")
