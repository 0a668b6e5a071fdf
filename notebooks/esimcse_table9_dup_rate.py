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
# # ESimCSE Table 9: the repetition rate dup_rate
# STS-B dev Spearman (×100) of ESimCSE-BERT-base for each maximal repetition rate, all else as the `esimcse-bert`
# preset (sub-word repetition, dup_len ~ U{0..max(2, ⌊dup_rate·N⌋)} re-drawn every step, queue 2.5 × batch).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
dup_rates: list = [0.08, 0.12, 0.16, 0.2, 0.24, 0.28, 0.32, 0.36]  # the paper's sweep
dup_rate: float = None  # run only this rate, e.g. papermill -p dup_rate 0.32; None runs the sweep

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

chosen = ex.sweep(dup_rates, dup_rate, "dup_rate")
esimcse.check_dup_rates(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(esimcse.table9_rows(chosen), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 9, ["STS-B"], ex.sweep_cell("STS-B"), paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 9: STS-B dev by dup_rate, paper vs reproduced"))

# %%
figure = plots.sweep(comparison, "dup_rate", "ESimCSE Table 9: STS-B dev by dup_rate")

# %%
ex.save_table(s, "esimcse_table9_dup_rate", "ESimCSE Table 9: dup_rate (STS-B dev)", comparison, [figure],
              paper="esimcse")
