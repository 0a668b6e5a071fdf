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
# # ESimCSE Table 6: batching by length instead of repetition
# STS-B dev Spearman (×100) on BERT-base, no momentum queue: "wr" repeats sub-words (= Table 4's "+ word
# repetition"); the other columns train SimCSE on batches drawn from one length bucket each (shuffled within the
# bucket, the batches of all buckets shuffled together), length = sub-word tokens without [CLS]/[SEP]: two buckets
# split at b, or the six buckets ≤3, 4, 5, 6, 7, ≥8 ("3∼8").

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
buckets: list = ["3", "4", "5", "6", "7", "8", "3-8"]  # b (two buckets) or a-b (fine-grained), the paper's columns
bucket: str = None  # run only this setting, e.g. -p bucket 5; None runs all

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

chosen = [str(b) for b in ex.sweep(buckets, bucket, "bucket setting")]
esimcse.check_buckets(chosen)
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(esimcse.table6_rows(chosen), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 6, ["STS-B"], ex.sweep_cell("STS-B"), paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 6: STS-B dev with length buckets, paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "ESimCSE Table 6: STS-B dev, repetition vs length buckets")

# %%
ex.save_table(s, "esimcse_table6_bucketing", "ESimCSE Table 6: length buckets (STS-B dev)", comparison, [figure],
              paper="esimcse")
