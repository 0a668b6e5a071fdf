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
# # SCD Table 2: transfer test
# Accuracy of SentEval's logistic regression on frozen `cls_before_pooler` embeddings (the profile's transfer
# configuration: `test` on paper and cpu, `fasttest` on smoke). Rows: the untrained backbone's [CLS], SimCSE as
# the SCD authors trained it, SCD's released checkpoint (paper profile) and ours; cited rows (♣ ♡) as published.
# The paper's SCD-BERT MR 73.21 / SUBJ 99.56 disagree with the README's 79.26 / 93.57 for the same checkpoint.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # SCD recipe: paper | official-code | released-checkpoints (the last two: BERT only)
backbones: list = ["bert", "roberta"]  # encoders of the table (RoBERTa runs on the paper profile only)
backbone: str = None  # run only this backbone, e.g. -p backbone bert; None runs both

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import scd

ex.check_parameters()

chosen = ex.sweep(backbones, backbone, "backbone")
scd.check_backbones(chosen)
scd.check_recipe(recipe, chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
columns = ["MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "Avg."]
long = ex.run_rows(scd.table2_rows(chosen, s.profile, recipe), s, (ex.transfer_eval(s.profile),),
                   ex.transfer_test_columns)
comparison = ex.compare(long, 2, columns, paper="scd")
display(ex.show(comparison, f"SCD Table 2: transfer test accuracy, paper vs reproduced (SCD recipe: {recipe})"))
display(ex.show_values(scd.literature(2), "the paper's rows from other papers (marked), as published"))

# %%
figure = plots.bars(comparison, "Avg.", "SCD Table 2: average transfer accuracy")

# %%
ex.save_table(s, "scd_table2_transfer", "SCD Table 2: transfer test", comparison, [figure], paper="scd",
              notes=[f"SCD recipe: {recipe}"])
