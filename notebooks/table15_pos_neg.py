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
# # DiffCSE Table 15 (Appendix B): edits as extra positives or negatives instead of equivariance
# STS-B dev Spearman and average transfer dev accuracy (BERT-base). SimCSE (`simcse-bert`) with the sentence edited
# at 15% of its tokens (MLM replacement, insertion, deletion) as an extra positive (the mean of the InfoNCE losses
# with the dropout view and with the edited sentence as the positive) or as an extra negative (in the denominator, as
# supervised SimCSE's hard negative); then DiffCSE's equivariance with the same edits (the runs of Table 4).
# Off the `paper` profile only STS-B dev is evaluated.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
roles: list = ["positive", "negative", "equivariance"]  # how the edited sentence is used
edits: list = ["replace", "insert", "delete"]  # MLM 15%, random insert 15%, random delete 15%

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

ex.check(len(roles) > 0 and len(edits) > 0, "give at least one role and one edit")
diffcse.check_choices(roles, diffcse.TABLE15_ROLES, "role(s)")
diffcse.check_choices(edits, [e for e in diffcse.EDIT_ROWS if e != "all"], "edit(s)")
s = ex.setup(profile, seeds, data_dir, results_dir, force)
evals = diffcse.ABLATION_EVALS[s.profile]

# %%
long = ex.run_rows(diffcse.table15_rows(roles, edits), s, evals, ex.dev_columns)
comparison = ex.compare(long, 15, ["STS-B", "Avg. transfer"])
display(ex.show(comparison, "Table 15: extra positives / negatives vs equivariance (dev), paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "Table 15: STS-B dev")

# %%
notes = [] if "transfer_dev" in evals else [f"Avg. transfer dev accuracy is evaluated on the paper profile only "
                                            f"(the {s.profile} profile: STS-B dev, see ABLATION_EVALS)."]
ex.save_table(s, "table15_pos_neg", "Table 15: augmentations as positives / negatives (dev)", comparison, [figure],
              notes)
