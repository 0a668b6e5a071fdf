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
# # DiffCSE Table 2: transfer tasks
# Test accuracy on the seven SentEval transfer tasks, SimCSE and DiffCSE's transfer models (`diffcse-*-transfer`:
# Table 13's hyper-parameters, chosen by the paper on average transfer dev accuracy; the checkpoint with the best STS-B
# dev Spearman, as App. A and run_diffcse.sh:17). The papers use SentEval's `test` configuration (10 folds, Adam);
# the smoke profile uses `fasttest` to stay within minutes, and says so below.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
backbones: list = ["bert", "roberta"]  # encoders of the table (RoBERTa runs on the paper profile only)
backbone: str = None  # run only this backbone; None runs both

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(backbones, backbone, "backbone")
ex.check(set(chosen) <= set(diffcse.BACKBONE_LABELS), f"backbones are {list(diffcse.BACKBONE_LABELS)}, got {chosen}")
s = ex.setup(profile, seeds, data_dir, results_dir, force)
evaluation = ex.transfer_eval(s.profile)
print(f"transfer evaluation: {evaluation}")

# %%
columns = ["MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "Avg."]
long = ex.run_rows(diffcse.table2_rows(chosen, s.profile), s, (evaluation,), ex.transfer_test_columns)
comparison = ex.compare(long, 2, columns)
display(ex.show(comparison, f"Table 2: transfer test accuracy ({evaluation}), paper vs reproduced"))

# %%
figure = plots.bars(comparison, "Avg.", "Table 2: average transfer accuracy")

# %%
ex.save_table(s, "table2_transfer", "Table 2: transfer test accuracy", comparison, [figure],
              [f"SentEval configuration: {evaluation.removeprefix('transfer_')}"])
