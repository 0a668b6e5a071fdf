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
# # DiffCSE Table 8: the weight λ of the RTD loss
# STS-B dev Spearman (×100) of DiffCSE-BERT-base for each λ, all else as the `diffcse-bert-sts` preset.
# λ = 0 is SimCSE with the BatchNorm projector, the same run as Table 5's "SimCSE w/ BatchNorm" (our inference: §5
# says only that λ = 0 is SimCSE, and the two print the same 82.22).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
lams: list = [0.0, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1]  # the paper's sweep
lam: float = None  # run only this λ, e.g. papermill -p lam 0.005; None runs the sweep

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(lams, lam, "λ")
diffcse.check_lams(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(diffcse.table8_rows(chosen), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 8, ["STS-B"], ex.sweep_cell("STS-B"))
display(ex.show(comparison, "Table 8: STS-B dev by λ, paper vs reproduced"))

# %%
figure = plots.sweep(comparison, "λ", "Table 8: STS-B dev by λ", rotate_labels=True)

# %%
ex.save_table(s, "table8_lambda", "Table 8: λ (STS-B dev)", comparison, [figure])
