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
# # DiffCSE Tables 9 and 10: retrieval on STS-B test
# Table 9: the three nearest sentences (cosine) to the paper's queries among the STS-B test sentences.
# Table 10: recall@1/5/10 of finding the partner of each of the 97 pairs with gold score 5 among the 2,758 sentence
# slots, queries in both directions, the query's own slot excluded.

# %% tags=["parameters"]
profile: str = "auto"  # paper (GPU + Hub), mini (BERT miniatures, Hub once), cpu (offline), smoke (tiny); auto: paper, mini or cpu
seeds: list = []  # training seeds; empty: the profile's default
data_dir: str = ""  # evaluation data and corpora; empty: $CSE_KIT_DATA or data/ in the repository
results_dir: str = ""  # results store; empty: $CSE_KIT_RESULTS or reports/results
force: bool = False  # retrain and re-evaluate even when a finished run exists

# %%
import pandas as pd
from IPython.display import display

from cse_kit import experiments as ex
from cse_kit.papers import diffcse
from cse_kit.data.published import paper_examples

ex.check_parameters()

s = ex.setup(profile, seeds, data_dir, results_dir, force)
rows = [r for r in diffcse.geometry_rows(s.profile) if r.preset]

# %%
long = ex.run_rows(rows, s, ("geometry",), ex.retrieval_columns)
comparison = ex.compare(long, 10, ["@1", "@5", "@10"])
display(ex.show(comparison, "Table 10: retrieval recall on STS-B test, paper vs reproduced"))

# %%
paper9 = paper_examples(9)
found = {label: recs[0]["metrics"]["geometry"]["nearest"] for label, recs in ex.records(rows, s, ("geometry",)).items()}
examples = pd.DataFrame([
    {"query": q, "rank": k + 1, **{f"{m} (paper)": paper9["rows"][m][i][k] for m in paper9["rows"]},
     **{column: value for m, hits in found.items() for column, value in
        ((f"{m} (ours, seed {s.seeds[0]})", hits[q][k][0]), (f"{m} cosine", hits[q][k][1]))}}
    for i, q in enumerate(paper9["queries"]) for k in range(3)])
display(ex.show_values(examples, "Table 9: the top-3 neighbours of the paper's queries, ours with their cosine"))

# %%
ex.save_table(s, "table9_10_retrieval", "Tables 9-10: retrieval on STS-B test", comparison,
              extra={"examples": examples.to_dict(orient="records")})
