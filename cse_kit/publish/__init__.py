"""Publishing a trained run (`cse-kit publish`): a folder that loads as it will be used, a model card whose every
number comes from the run's record beside the paper's, MTEB's results layout, and the push to the Hugging Face Hub.

- `run.py`: which run: a record key, a store's run folder or a `cse-kit train` run folder, found with its record (or
  summary.json) and the records of its configuration under other seeds; `PublishError`, the one line that stops it.
- `folder.py`: the folder, written whole or not at all: a sentence-transformers model where its vectors are the kit's
  (checked on sentences at publish time), else the kit's export as it is (a Hugging Face model with cse_kit.json).
- `card.py`: README.md, the card: front matter `huggingface_hub.ModelCard` reads (model-index with the record's
  results), then what was trained, the results over seeds beside the paper's, the training, how to load and evaluate
  it, the BibTeX of its method's paper and baselines. A smoke or cpu run's card says first that it is not the
  paper's model.
- `numbers.py`: the numbers a card shows: the record's STS (its STS test, or its per-pair cosines), transfer and MTEB
  results, over seeds, the paper's row.
- `origins.py`: what a model came from: its method's paper and baselines (citations.json), base model, data.
- `mteb_results.py`: `mteb_results/<org>__<name>/<revision>/`, MTEB's results repository's layout.
- `hub.py`: the push to the Hub, one commit, and the command that pushes a published folder.
- `notebook.py`: from a notebook: each trained run's publish command, a table row's run published."""

from .card import card_data, differences, model_card, official_script
from .folder import Published, publish, st_difference, st_refusal
from .hub import push, push_command
from .mteb_results import MTEB_DIR, mteb_revision, write_mteb_results
from .notebook import commands, row
from .numbers import PAPER_ROWS, mteb_values, over_seeds, paper_numbers, sts_sample, sts_values, transfer_values
from .origins import BASE_MODELS, DATASETS, METHOD_PAPERS, citations, method_papers, method_words
from .run import PublishError, Run, find_run, model_name, stored_record

__all__ = ["card_data", "differences", "model_card", "official_script", "Published", "publish", "st_difference",
           "st_refusal", "push", "push_command", "MTEB_DIR", "mteb_revision", "write_mteb_results", "commands", "row",
           "PAPER_ROWS", "mteb_values", "over_seeds", "paper_numbers", "sts_sample", "sts_values", "transfer_values",
           "BASE_MODELS", "DATASETS", "METHOD_PAPERS", "citations", "method_papers", "method_words", "PublishError",
           "Run", "find_run", "model_name", "stored_record"]
