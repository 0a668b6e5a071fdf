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
# # DiffCSE Table 4: which edit the discriminator detects
# STS-B dev Spearman and average transfer dev accuracy of DiffCSE-BERT-base (the `diffcse-bert-sts` settings) when the
# equivariance task edits 15% of the tokens by MLM replacement (the generator's tokens; label: replaced), by inserting
# [MASK]s the generator fills (label: inserted), by deleting tokens (label: the token before was deleted), or by one of
# the three per sentence. MLM 15% is the same run as Table 7's 15% row; all four are Table 15's equivariance rows.
# Off the `paper` profile only STS-B dev is evaluated.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
edits: list = ["replace", "insert", "delete", "all"]  # MLM 15%, randomly insert/delete 15%, combining all
edit: str = ""  # run only this edit, e.g. papermill -p edit insert

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(edits, edit or None, "edit")
diffcse.check_choices(chosen, diffcse.EDIT_ROWS, "edit(s)")
s = ex.setup(profile, seeds, data_dir, results_dir, force)
evals = diffcse.ABLATION_EVALS[s.profile]

# %%
long = ex.run_rows(diffcse.table4_rows(chosen), s, evals, ex.dev_columns)
comparison = ex.compare(long, 4, ["STS-B", "Avg. transfer"])
display(ex.show(comparison, "Table 4: equivariance augmentations (dev), paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "Table 4: STS-B dev")

# %%
notes = [] if "transfer_dev" in evals else [f"Avg. transfer dev accuracy is evaluated on the paper profile only "
                                            f"(the {s.profile} profile: STS-B dev, see ABLATION_EVALS)."]
ex.save_table(s, "table4_augmentation", "Table 4: equivariance augmentations (dev)", comparison, [figure], notes)
