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
# # DiffCSE Table 7: masking ratio
# STS-B dev Spearman (×100) of DiffCSE-BERT-base for each masking ratio, all else as the `diffcse-bert-sts` preset
# (whose 30% is the paper's choice).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
mask_ratios: list = [0.15, 0.20, 0.25, 0.30, 0.40, 0.50]  # the paper's sweep
mask_ratio: float = None  # run only this ratio, e.g. -p mask_ratio 0.3; None runs the sweep

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffcse

ex.check_parameters()

chosen = ex.sweep(mask_ratios, mask_ratio, "masking ratio")
diffcse.check_mask_ratios(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(diffcse.table7_rows(chosen), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 7, ["STS-B"], ex.sweep_cell("STS-B"))
display(ex.show(comparison, "Table 7: STS-B dev by masking ratio, paper vs reproduced"))

# %%
figure = plots.sweep(comparison, "masking ratio", "Table 7: STS-B dev by masking ratio")

# %%
ex.save_table(s, "table7_mask_ratio", "Table 7: masking ratio (STS-B dev)", comparison, [figure])
