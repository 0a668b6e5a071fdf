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
# # ESimCSE Table 10: the momentum queue size
# STS-B dev Spearman (×100) of ESimCSE-BERT-base for each queue size, as a multiple of the batch size (64 on the
# paper and cpu profiles, so 2.5 × = the preset's 160), all else as the `esimcse-bert` preset.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
queue_factors: list = [1, 1.5, 2, 2.5, 3]  # queue size / batch size, the paper's sweep
queue_factor: float = None  # run only this one, e.g. papermill -p queue_factor 2.5; None runs the sweep

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

chosen = ex.sweep(queue_factors, queue_factor, "queue size")
esimcse.check_queue_factors(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(esimcse.table10_rows(chosen, s.profile), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 10, ["STS-B"], paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 10: STS-B dev by queue size, paper vs reproduced"))

# %%
figure = plots.sweep(comparison, "queue size", "ESimCSE Table 10: STS-B dev by queue size")

# %%
ex.save_table(s, "esimcse_table10_queue", "ESimCSE Table 10: queue size (STS-B dev)", comparison, [figure],
              paper="esimcse")
