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
# # Every method tuned with the same budget
# Each paper tuned its own method (DiffCSE's λ, ESimCSE's duplication rate, SCD's weights) and copied its baselines'
# numbers from earlier papers. Does a method still win when every method gets the same tuning effort? Here each
# method is searched by one Optuna study (seeded TPE, `trials` trials each: lr and temperature around its paper
# recipe and its own main knob), every trial a run of the results store selected on its own dev score, so **no test
# set is read during a search**. Then the chosen configuration and the paper recipe are both tested over the seeds:
# mean ± std, paired tests against the paper recipe and between methods (the head-to-head's: a paired t-test over
# seeds and a paired bootstrap over the STS test pairs), the papers' claimed orderings at equal budget, the
# best-so-far curve of each search and its cost. A rerun reads the studies and runs it has; a larger `trials` adds
# only the missing trials.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # test seeds, the first also every trial's; empty: the head-to-head's (paper 5, mini 3, cpu 3, smoke 2)
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store (the studies are kept beside it, studies.sqlite3); empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate the test runs even when finished ones exist (a study's trials are kept)
methods: list = ["SimCSE", "DiffCSE", "SCD", "ESimCSE"]  # the methods searched (any of compare_methods', or your own)
your_methods: list = []  # methods of your own (docs/extending.md), on SimCSE's preset; empty: every one registered
plugin: str = ""  # a module registering a method of your own (a .py path or an import path); empty: $CSE_KIT_PLUGINS's only
trials: int = 0  # trials per method, the same for all (the budget); 0: the profile's (paper 30, mini 8, cpu 8, smoke 3)
space: dict = {}  # method -> its space (cse-kit tune --space syntax) in place of its default (lr, temperature, its knob)
bootstrap_samples: int = 1000  # replicates of the paired bootstrap over the STS test pairs
level: float = 0.05  # significance level of both tests

# %%
from cse_kit import experiments as ex
from cse_kit.methods import use_plugins
from cse_kit.papers import comparison as cmp
from cse_kit.papers import equal_budget as eb

ex.check_parameters()
if plugin:
    use_plugins(plugin)  # imported here, and by every worker this notebook starts

methods = methods + [m for m in your_methods or cmp.own_methods() if m not in methods]
cmp.check_methods(methods, [eb.PAPER_RECIPE])
s = ex.setup(profile, seeds, data_dir, results_dir, force, default_seeds=cmp.SEEDS)

# %%
e = eb.equal_budget(s, methods, trials or eb.TRIALS[s.profile], space, bootstrap_samples, level)
eb.show(e, level)
print("\n".join(e.h.words))

# %%
figures = eb.figures(e)

# %%
ex.save_table(s, eb.NOTEBOOK, eb.TITLE, figures=figures, paper=None,
              notes=eb.notes(e),
              extra={"significance_level": level, "tables": eb.tables(e)})
