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
# # ESimCSE Table 5: sentence-length extension methods
# STS-B dev Spearman (×100) of ESimCSE-BERT-base (with its momentum queue) for each way of making the positive
# longer: a random stop-word (NLTK's English list, single-token words), [MASK], or the MLM generator's top-1
# prediction for that [MASK] (the profile's generator: DistilBERT on paper, the fitted MiniLM head on cpu) inserted
# after each selected word; whole-word repetition; sub-word repetition (ESimCSE).

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
extensions: list = ["+Inserting Stop-words", "+Inserting [MASK]", "+Inserting Masked Prediction", "+Word Repetition",
                    "+Sub-word Repetition"]  # the paper's rows
extension: str = None  # run only this row, e.g. -p extension "+Word Repetition"; None runs all

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

chosen = ex.sweep(extensions, extension, "length-extension method")
ex.check(set(chosen) <= set(esimcse.EXTENSIONS), f"length-extension methods are {list(esimcse.EXTENSIONS)}, got {chosen}")
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = ex.run_rows(esimcse.table5_rows(chosen), s, ("sts_dev",), ex.dev_columns)
comparison = ex.compare(long, 5, ["STS-B"], paper="esimcse")
display(ex.show(comparison, "ESimCSE Table 5: STS-B dev by length-extension method, paper vs reproduced"))

# %%
figure = plots.bars(comparison, "STS-B", "ESimCSE Table 5: STS-B dev by length-extension method")

# %%
ex.save_table(s, "esimcse_table5_extension", "ESimCSE Table 5: length extension (STS-B dev)", comparison, [figure],
              paper="esimcse")
