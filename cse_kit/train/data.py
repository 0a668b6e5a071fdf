"""Training data: a corpus (one sentence per line; each sentence gives two dropout views) or NLI triplets,
tokenized once with `datasets` (truncated to max_seq_length, as all the papers' code) and cached on disk; batches
in a seeded order per epoch, addressed by step, so a resumed run sees exactly the batches it would have seen."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import torch

from ..data import (
    DataError, load_corpus, load_nli_triplets, load_sentence_pairs, load_snli_triplets, load_sts_texts,
    resolve_data_dir,
)
from ..eval.encode import pad_length
from ..data.registry import BUILT_SOURCES, ORDERED_CORPORA, REGISTRY, SNLI_TRIPLETS, STS_TEXTS, is_nli
from ..io import ensure_dir, remove, writing
from ..progress import Steps, in_kernel


def load_examples(source: str, data_dir=None, max_examples: int | None = None) -> list[tuple[str, ...]]:
    """(sentence,) per corpus line, (sentence, next sentence) per consecutive pair of an ordered corpus, or
    (anchor, entailment, contradiction) per NLI row ("NLI", a triplet CSV, or "SNLI-triplets" from SNLI dev/test)."""
    is_file = source not in REGISTRY and source not in BUILT_SOURCES
    if is_file and not Path(source).is_file():
        known = [n for n in REGISTRY if n.startswith(('Wiki1M', 'NLI')) or n in ORDERED_CORPORA] + list(BUILT_SOURCES)
        raise FileNotFoundError(f"training data {source!r} is neither a registered dataset ({', '.join(known)})"
                                " nor a file")
    if source in ORDERED_CORPORA:
        examples = load_sentence_pairs(source, data_dir)
    elif source == SNLI_TRIPLETS:
        examples = [(r.anchor, r.positive, r.negative) for r in load_snli_triplets(data_dir)]
    elif source == STS_TEXTS:
        examples = [(text,) for text in load_sts_texts(data_dir)]
    elif is_nli(source):
        rows = load_nli_triplets(path=source) if is_file else load_nli_triplets(data_dir=data_dir)
        examples = [(r.anchor, r.positive, r.negative) for r in rows]
    else:
        lines = load_corpus(path=source) if is_file else load_corpus(source, data_dir)
        examples = [(line,) for line in lines]
    if not any(text.strip() for ex in examples for text in ex):
        raise DataError(f"training data {source!r} holds no text ({len(examples)} empty examples); give a file with "
                        "one sentence per line (or an NLI triplet CSV), or re-import the dataset")
    return examples[:max_examples] if max_examples else examples


def subsample_examples(examples: list, fraction: float, seed: int) -> list:
    """DiffAug's label fractions (Tables 2, 7: 1% and 10% of NLI, five subsets drawn with seeds): a random subset of
    round(fraction * len(examples)) examples (at least 1), drawn with a torch generator seeded with `seed`, in their
    original order. fraction 1.0 returns `examples` itself."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1] (0.01 for 1%), got {fraction!r}")
    if fraction == 1:
        return examples
    k = max(1, round(fraction * len(examples)))
    chosen = torch.randperm(len(examples), generator=torch.Generator().manual_seed(seed))[:k]
    return [examples[i] for i in chosen.sort().values.tolist()]


def tokenize(examples: list[tuple[str, ...]], tokenizer, max_seq_length: int, cache_dir: Path, template=None):
    """A `datasets.Dataset` with one `ids<k>` column per text column, cached under cache_dir by content. With a
    prompt `template` (cse_kit.eval.prompt.Template) each text's sub-words are truncated to max_seq_length and wrapped
    in it, as the official prompt code (DiffAug train.py:609-612): the template's tokens come on top."""
    from datasets import Dataset

    key = hashlib.sha256()
    for part in (tokenizer.name_or_path, type(tokenizer).__name__, len(tokenizer), max_seq_length, len(examples),
                 *([template.text] if template else [])):
        key.update(repr(part).encode())
    for ex in examples:
        key.update("\t".join(ex).encode() + b"\n")
    cache = Path(cache_dir) / f"{key.hexdigest()[:20]}.arrow"
    ensure_dir(cache.parent, "the tokenized cache")
    columns = {f"text{k}": [ex[k] for ex in examples] for k in range(len(examples[0]))}

    def encode(batch):
        if template is not None:
            return {f"ids{k}": [template.wrap_ids(ids[:max_seq_length]) for ids in
                                tokenizer(batch[f"text{k}"], add_special_tokens=False)["input_ids"]]
                    for k in range(len(columns))}
        return {f"ids{k}": tokenizer(batch[f"text{k}"], truncation=True, max_length=max_seq_length)["input_ids"]
                for k in range(len(columns))}

    there = set(cache.parent.iterdir())
    steps = []  # a kernel's progress (cse_kit.progress), made at the first batch: a cached map makes none

    def encode_where_seen(batch):
        if not steps:
            steps.append(Steps(len(examples), "tokenizing", "examples"))
        steps[0].update(len(batch["text0"]))
        return encode(batch)

    with writing(cache), _own_bars_off(in_kernel()):
        try:  # the content key is the fingerprint: datasets would otherwise hash `encode` with the tokenizer it
            # closes over (dill, 0.44 s a run, cached or not)
            dataset = Dataset.from_dict(columns).map(encode_where_seen if in_kernel() else encode, batched=True,
                                                     remove_columns=list(columns), cache_file_name=str(cache),
                                                     load_from_cache_file=True, new_fingerprint=key.hexdigest()[:20],
                                                     desc="tokenizing")
        except BaseException:  # datasets' temporary file: its own clean-up stops at the full disk's next error
            for path in set(cache.parent.iterdir()) - there:
                remove(path)
            raise
    for done in steps:
        done.close()
    return dataset


@contextlib.contextmanager
def _own_bars_off(off: bool):
    """datasets' own progress bars off for the block (in a kernel they would reach only the notebook, one output per
    redraw), as they were after it."""
    import datasets

    was_off = datasets.are_progress_bars_disabled()
    if off:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if off and not was_off:
            datasets.enable_progress_bars()


def parse_length_buckets(spec: str | None) -> list[int] | None:
    """ESimCSE Table 6: the largest length of each bucket but the last. "b" -> two buckets (<= b, > b);
    "a-b" -> fine-grained buckets <= a, a+1, ..., >= b (the paper's "3~8": <=3, 4, 5, 6, 7, >=8)."""
    if spec is None:
        return None
    low, sep, high = str(spec).partition("-")
    if not (low.isdigit() and (not sep or (high.isdigit() and int(low) < int(high)))):
        raise ValueError(f"length_buckets {spec!r}: write b (two buckets, length <= b and > b) or a-b with a < b "
                         "(buckets <= a, a+1, ..., >= b)")
    return [int(low)] if not sep else list(range(int(low), int(high)))


def bucketed_order(lengths: torch.Tensor, bounds: list[int], batch_size: int, g: torch.Generator) -> torch.Tensor:
    """Example order in which every block of batch_size examples comes from one length bucket: each bucket
    shuffled, cut into full batches (its remainder dropped), and the batches of all buckets shuffled together."""
    bucket = torch.bucketize(lengths, torch.tensor(bounds))
    batches = []
    for b in range(len(bounds) + 1):
        members = torch.nonzero(bucket == b).flatten()
        members = members[torch.randperm(len(members), generator=g)]
        batches += list(members[:len(members) // batch_size * batch_size].split(batch_size))
    order = torch.randperm(len(batches), generator=g)
    return torch.cat([batches[i] for i in order.tolist()]) if batches else torch.zeros(0, dtype=torch.long)


def longest_row(dataset, columns: list[str]) -> int:
    """The most ids a row of `dataset` holds in any of its id `columns` (from Arrow's list lengths where the dataset
    is a datasets.Dataset: a million rows in milliseconds)."""
    table = getattr(dataset, "data", None)
    if table is not None and hasattr(table, "column"):
        import pyarrow.compute as pc

        return max(pc.max(pc.list_value_length(table.column(c))).as_py() for c in columns)
    return max(len(ids) for c in columns for ids in dataset[c])


class Batches:
    """Global batch `step` of the run: a seeded permutation per epoch, incomplete last batch dropped, each
    process taking its contiguous share. Unsupervised rows are duplicated into two views; with `next_sentence` the
    rows are (sentence, next sentence) pairs of an ordered corpus: the sentence gives the two views and the next
    sentence comes as `next_input_ids` / `next_attention_mask`. `example_index` says which examples a batch holds.
    `length_buckets` (ESimCSE Table 6) batches sentences of similar length: the length is the number of tokens
    without the `special_tokens` the tokenizer adds ([CLS], [SEP]). `padding` (cse_kit.train.step.pad_length):
    each batch to its longest row, every batch to the data's longest row (`fixed_length`: given where reading every
    row is dear, a corpus tokenized as it is read), or to a few lengths."""

    def __init__(self, dataset, batch_size: int, seed: int, pad_id: int, rank: int = 0, world: int = 1,
                 next_sentence: bool = False, length_buckets: str | None = None, special_tokens: int = 2,
                 padding: str = "longest", fixed_length: int | None = None):
        if batch_size % world:
            raise ValueError(f"batch_size {batch_size} must be divisible by the number of processes ({world})")
        if len(dataset) < batch_size:
            raise ValueError(f"only {len(dataset)} training examples for a batch of {batch_size}")
        self.dataset, self.batch_size, self.seed, self.pad_id = dataset, batch_size, seed, pad_id
        self.rank, self.world, self.next_sentence = rank, world, next_sentence
        self.columns = sorted(c for c in dataset.column_names if c.startswith("ids"))
        self.bounds = parse_length_buckets(length_buckets)
        self.lengths = None
        if self.bounds is not None:
            self.lengths = torch.tensor([len(ids) - special_tokens for ids in dataset[self.columns[0]]])
        self.padding = padding
        self.fixed_length = None if padding == "longest" else fixed_length or longest_row(dataset, self.columns)
        self._order = (None, None)
        self.steps_per_epoch = len(self.order(0)) // batch_size
        if not self.steps_per_epoch:
            raise ValueError(f"no length bucket {length_buckets!r} holds a full batch of {batch_size}")

    def order(self, epoch: int) -> torch.Tensor:
        if self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(len(self.dataset), generator=g) if self.bounds is None else \
                bucketed_order(self.lengths, self.bounds, self.batch_size, g)
            self._order = (epoch, order)
        return self._order[1]

    def __call__(self, step: int) -> dict:
        epoch, pos = divmod(step, self.steps_per_epoch)
        share = self.batch_size // self.world
        start = pos * self.batch_size + self.rank * share
        index = self.order(epoch)[start:start + share].tolist()
        rows = self.dataset[index]
        if self.next_sentence:
            batch = self._pad([rows["ids0"]] * 2)
            following = self._pad([rows["ids1"]])
            batch.update(next_input_ids=following["input_ids"][:, 0],
                         next_attention_mask=following["attention_mask"][:, 0])
        else:
            batch = self._pad([rows[c] for c in self.columns] * (2 if len(self.columns) == 1 else 1))
        return {**batch, "example_index": torch.tensor(index)}

    def _pad(self, views: list[list[list[int]]]) -> dict:
        """(rows, views, length) ids and attention mask, right-padded as `padding` says."""
        length = pad_length(max(len(ids) for view in views for ids in view), self.padding, self.fixed_length)
        input_ids = torch.full((len(views[0]), len(views), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for v, view in enumerate(views):
            for i, ids in enumerate(view):
                input_ids[i, v, :len(ids)] = torch.tensor(ids)
                attention_mask[i, v, :len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def tokenized_cache_dir(data_dir=None) -> Path:
    return resolve_data_dir(data_dir) / "cache" / "tokenized"
