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
# # ESimCSE Tables 1 and 7: the length-difference bias
# Mean difference (×100) between the cosine similarity a model predicts and the normalised gold score, on each STS
# test set, over the pairs whose two sentences differ in length by more than the threshold ("LD > 3") and by at most
# it ("LD ≤ 3"); "Avg." is the mean of the seven sets, and Table 1 is SimCSE's "Avg." column. Models: our
# `simcse-bert` and `esimcse-bert` runs and, on the paper profile, the released checkpoints the paper analysed.
#
# The paper leaves three things open (§1, §5.4); our reading, each a parameter: the **absolute**
# difference |cos − gold| (its numbers are all positive), gold **÷ 5** on every set (SICK-R too, though it is scored
# 1-5: `gold_scale=minmax` maps its 1-5 onto 0-1), length in **whitespace words** (`length_unit=tokens`: the
# model's sub-words without [CLS]/[SEP]), threshold 3. The paper's numbers are compared only at threshold 3.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
threshold: int = 3  # pairs whose lengths differ by more than this are "LD > threshold" (the paper: 3)
length_unit: str = "words"  # words (whitespace) | tokens (the model's sub-words, without [CLS]/[SEP])
gold_scale: str = "divide"  # divide (gold / 5 on every set) | minmax (SICK-R's 1-5 mapped onto 0-1)
absolute: bool = True  # |cos − gold| (True) or the signed cos − gold (False)

# %%
import pandas as pd
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import esimcse

ex.check_parameters()

esimcse.check_length_bias(threshold, length_unit, gold_scale)
ex.check(isinstance(absolute, bool), f"absolute must be True or False, got {absolute!r}")
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
long = esimcse.length_bias_long(esimcse.model_rows(s.profile), s, threshold, length_unit, gold_scale, absolute)
table7 = ex.compare(long, 7, esimcse.TABLE7_COLUMNS, paper="esimcse")
table1 = ex.compare(esimcse.table1_from_table7(long, threshold), 1, ["Avg. Similarity Diff"], paper="esimcse")
gaps = esimcse.length_gaps(long, threshold)
display(ex.show(table1, "ESimCSE Table 1: SimCSE's average similarity difference by length difference"))
display(ex.show(table7, "ESimCSE Table 7: similarity difference by length difference, per STS test set"))
display(ex.show_values(gaps, "Avg.(LD ≤ t) − Avg.(LD > t), the bias the paper reads off Table 7 (a smaller gap: "
                             "less length bias)"))

# %%
figure = plots.bars(table7[table7.n > 0], "Avg.", "ESimCSE Table 7: average similarity difference")

# %%
reading = (f"{'|cos − gold|' if absolute else 'cos − gold (signed)'} ×100; gold "
           f"{'÷ 5 on every set' if gold_scale == 'divide' else '÷ 5, SICK-R (1-5) mapped onto 0-1'}; length "
           f"difference in {length_unit}, threshold {threshold}")
both = pd.concat([table1.assign(row="1: " + table1.row), table7.assign(row="7: " + table7.row)])
ex.save_table(s, "esimcse_table1_7_length_bias", "ESimCSE Tables 1 and 7: length-difference bias", both, [figure],
              notes=[reading], extra={"tables": {"Avg.(LD ≤ t) − Avg.(LD > t)": gaps.to_dict("records")}},
              paper="esimcse")
