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

# %%

# %% [markdown]
# # DiffAug Table 1: STS test (BERT-base)
# Spearman (×100) on STS12-16 (`all` aggregation), STS-B and SICK-R test. DiffAug's sentence vector is the [MASK]
# state of PromptBERT's template with both prefixes attended (`prompt_mask`, no denoising at test, as the official
# evaluation.py). Rows trained by the kit under one protocol: ConSERT (`consert-bert`), SimCSE (`simcse-bert`;
# supervised `simcse-sup-bert`), PromptBERT (`promptbert-bert`; supervised `promptbert-sup-bert`), DiffCSE
# (`diffcse-bert-sts`), ConSERT_joint (Table 6's joint strategy, α chosen on STS-B dev), DiffAug semi-supervised
# w/o and w/ the auxiliary loss and supervised (`diffaug-*-bert`, or the official scripts' `-official` presets with
# `recipe`); the untrained backbone's [CLS] and mean pooling; the authors' released checkpoints (paper profile).
# Rows from other pipelines (BERT-flow, SBERT) are shown below as the paper's numbers, with their source.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default (the paper: mean ± std over 3 runs)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper (Table 5) | official-code (the official scripts' presets)
alphas: list = []  # ConSERT_joint's α grid; empty: the profile's (as Table 6, whose runs it shares)

# %%
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.data.published import average_mismatches
from cse_kit.papers import diffaug

ex.check_parameters()

diffaug.check_recipe(recipe, ["bert"])
s = ex.setup(profile, seeds, data_dir, results_dir, force)

# %%
columns = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
rows, groups = diffaug.table1_rows(s.profile, recipe, alphas)
long = ex.run_rows(rows, s, ("sts_dev", "sts_test"), diffaug.sts_and_dev_columns)
selected, chosen = ex.best_on_dev(long, groups, diffaug.DEV_COLUMN)
comparison = ex.compare(selected, 1, columns, paper="diffaug")
display(ex.show(comparison, f"DiffAug Table 1: STS test Spearman, paper vs reproduced (DiffAug recipe: {recipe})"))
display(ex.show_values(diffaug.chosen_alphas(chosen), "ConSERT_joint's α, chosen on mean STS-B dev"))
cited = diffaug.literature(1, list(selected.row))
display(ex.show_values(cited, "cited rows, from other pipelines (not re-run)"))

# %%
figure = plots.bars(comparison, "Avg.", "DiffAug Table 1: average STS test")

# %%
ex.save_table(s, "diffaug_table1_sts", "DiffAug Table 1: STS test (BERT-base)", comparison, [figure],
              paper="diffaug", notes=[f"DiffAug recipe: {recipe}",
                                      "ConSERT_joint's α, chosen on STS-B dev: "
                                      + ", ".join(f"{a:g}" for a in diffaug.alpha_of(chosen).values()),
                                      "cited, from other pipelines: " + ", ".join(cited.index),
                                      *average_mismatches(1, "diffaug")])
