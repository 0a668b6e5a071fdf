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
# # DiffAug Tables 2 and 7: average STS by fraction of labelled NLI data (BERT-base, RoBERTa-base)
# Average Spearman (×100) over the 7 STS test sets. Each low-data cell is the mean over `subsets` random subsets of
# the NLI triplets (drawn with seeds 0, 1, ...) times the seeds: the paper's 5 × 3 = 15 models. DiffAug's
# semi-supervised row is the w/ aux loss recipe (Table 1's 80.61 at 100%); the supervised rows train on the subset
# alone. The `_joint` baselines are Table 6's joint strategy: each one's α is chosen on STS-B dev among the 100% runs
# of the grid (shared with Table 6), then used at every fraction; their 0% is the unsupervised method. The supervised
# SimCSE and PromptBERT (PromptRoBERTa) rows are the kit's `simcse-sup-*` and `prompt*-sup-*`.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists
recipe: str = "paper"  # DiffAug recipe: paper | official-code (BERT only)
fractions: list = [0.01, 0.1, 1.0]  # fractions of the NLI triplets (the paper's 1%, 10%, 100%)
fraction: float = None  # run only this fraction, e.g. -p fraction 0.01; None runs all
subsets: int = None  # random subsets per low-data fraction; None: 5 on paper (as the paper), 1 elsewhere
backbones: list = ["bert", "roberta"]  # Table 2: BERT, Table 7: RoBERTa (RoBERTa runs on paper and smoke only)
backbone: str = None  # run only this backbone, e.g. -p backbone bert; None runs both
alphas: list = []  # the `_joint` baselines' α grid; empty: the profile's (as Table 6)

# %%
import pandas as pd
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.experiments import plots
from cse_kit.papers import diffaug

ex.check_parameters()

chosen = ex.sweep(backbones, backbone, "backbone")
diffaug.check_backbones(chosen)
diffaug.check_recipe(recipe, chosen)
chosen_fractions = ex.sweep(fractions, fraction, "fraction")
diffaug.check_fractions(chosen_fractions)
s = ex.setup(profile, seeds, data_dir, results_dir, force)
n_subsets = diffaug.label_subsets(s.profile, subsets)
print(f"{n_subsets} subset(s) per low-data fraction x {len(s.seeds)} seed(s)")


# %%
def average_in(column):
    return lambda record: {column: record["metrics"]["sts_test"]["avg"]}


parts, alpha_notes = [], []
for b in chosen:
    table = diffaug.FRACTION_TABLES[b]
    candidates, groups = diffaug.joint_selection_rows(b, s.profile, alphas)
    selection = ex.run_rows(candidates, s, ("sts_dev", "sts_test"), diffaug.sts_and_dev_columns)
    joint_alpha = diffaug.alpha_of(ex.best_on_dev(selection, groups, diffaug.DEV_COLUMN)[1])
    alpha_notes += [f"Table {table} {row}: α {a:g}" for row, a in joint_alpha.items()]
    long = pd.concat([ex.run_rows(diffaug.unsupervised_rows(b), s, ("sts_test",), average_in("0%")),
                      *[ex.run_rows(diffaug.fraction_rows(b, f, n_subsets, s.profile, recipe, joint_alpha), s,
                                    ("sts_test",), average_in(diffaug.fraction_label(f))) for f in chosen_fractions]])
    labels = ["0%"] + [diffaug.fraction_label(f) for f in chosen_fractions]
    part = ex.compare(long, table, labels, paper="diffaug")
    display(ex.show(part, f"DiffAug Table {table} ({diffaug.BACKBONE_LABELS[b]}): average STS test by label fraction"))
    parts.append(part.assign(row=f"{table}: " + part["row"]))
comparison = pd.concat(parts, ignore_index=True)
print("α of the _joint rows, chosen on STS-B dev at 100%: " + "; ".join(alpha_notes))

# %%
figure = plots.series(comparison, "fraction of labelled NLI data", "DiffAug Tables 2 and 7: average STS")

# %%
notes = [f"DiffAug recipe: {recipe}; {n_subsets} subset(s) per low-data fraction x seeds {s.seeds}",
         "α of the _joint rows, chosen on STS-B dev at 100%: " + "; ".join(alpha_notes)]
if s.profile != "paper":
    notes.append(f"{s.profile} profile: the fractions are of the profile's NLI triplets (SNLI dev + test, about 5.9k, "
                 "not the 275k of SimCSE's NLI)" + (f"; below 100% the batches are "
                 f"{diffaug.SMALL_FRACTION_BATCH[s.profile]} so that 1% holds one"
                 if s.profile in diffaug.SMALL_FRACTION_BATCH else ""))
ex.save_table(s, "diffaug_table2_7_label_fraction", "DiffAug Tables 2 and 7: average STS by label fraction",
              comparison, [figure], paper="diffaug", notes=notes)
