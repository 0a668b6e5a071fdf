"""ESimCSE (Wu et al. 2022): SimCSE whose positive is the sentence with some of its tokens repeated, so the two
views of a pair differ in length, plus a MoCo-style queue of extra negatives: the original sentences of earlier
batches, encoded by a momentum encoder (an EMA of the encoder, dropout off) and the online projector.

Repetition runs here, on token ids, inside every forward: a sentence gets a new repetition each time it is seen
(the paper). The official code repeats once at preprocessing and starts the momentum encoder from random weights;
both are the `official-code` variant. Only `.encoder` is exported; the momentum encoder and the queue are
training-only state of the objective (persistent buffers and frozen parameters, so checkpoints keep them)."""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from ..eval.encode import pad_length, pooled_output
from .contrastive import gather_with_grad
from .heads import generator_head_input
from .objective import check_choice, variant_choices
from .registry import register
from .simcse import SimCSE

#: Where the paper and the official code (caskcsg/sentemb, ESimCSE/) differ; the paper is the default.
VARIANTS = {
    "paper": {"dup_sampling": "paper", "momentum_init": "encoder"},
    "official-code": {"dup_sampling": "official", "momentum_init": "random"},
}
CHOICES = {
    "dup_level": {"subword": "repeat sub-word tokens after tokenisation (the method)",
                  "word": "repeat whole words: every sub-word piece of a selected word (Table 5's word repetition)"},
    "length_extension": {
        "repetition": "duplicate each selected unit in place (the method)",
        "stopword": "insert a random English stop-word after each selected unit (Table 5)",
        "mask": "insert [MASK] after each selected unit (Table 5)",
        "masked_prediction": "insert [MASK] after each selected unit, replaced by the MLM generator's top-1 (Table 5)",
        "none": "no length extension: the positive is the sentence itself, as SimCSE (Tables 4, 6)"},
    "dup_sampling": {
        "paper": "dup_len ~ U{0..min(N, max(2, floor(dup_rate*N)))}, N = units between the first and the final "
                 "token, re-drawn every time a sentence is seen (Eq. 3-4)",
        "official": "once per sentence for the whole run (seeded by seed and example index); dup_len ~ "
                    "U{0..min(10, floor(dup_rate*len)) - 1}, len counting [CLS]/[SEP] (official train.py)"},
    "momentum_init": {"encoder": "the momentum encoder starts as a copy of the encoder (paper)",
                      "random": "the momentum encoder starts from random weights (the official code's bug)"},
}
#: Table 10's best queue: 2.5 x batch size (160 for a batch of 64)
QUEUE_PER_BATCH = 2.5
#: the official code never duplicates more than 10 tokens (train.py: min(10, ...))
OFFICIAL_MAX_DUP = 10

#: NLTK's English stop-word list (nltk.corpus.stopwords.words("english"), 179 words; nltk is not installed here).
#: Only the words the tokenizer keeps as one token are inserted (the contractions split into several).
STOP_WORDS = tuple("""i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their theirs themselves what
which who whom this that that'll these those am is are was were be been being have has had having do does did doing
a an the and but if or because as until while of at by for with about against between into through during before
after above below to from up down in out on off over under again further then once here there when where why how all
any both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't""".split())


def word_continuation(tokenizer) -> list[bool]:
    """Per vocabulary id: does this token continue the word of the token before it? WordPiece marks
    continuations with `##`; byte-level BPE (RoBERTa) and SentencePiece mark word starts with `Ġ` / `▁`."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if any(t.startswith("##") for t in tokens):
        return [t.startswith("##") for t in tokens]
    marker = "Ġ" if any(t.startswith("Ġ") for t in tokens) else "▁"
    return [not t.startswith(marker) for t in tokens]


def single_token_ids(tokenizer, words) -> list[int]:
    """Ids of the words the tokenizer encodes as one token (with a leading space, as inside a sentence)."""
    ids = (tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in words)
    return sorted({i[0] for i in ids if len(i) == 1})


class LengthExtender:
    """Builds ESimCSE's positive from token ids: picks dup_len units (sub-words or words) among the tokens between
    the first ([CLS] / <s>) and the final ([SEP] / </s>) of each row, padding excluded, uniformly without
    replacement, and extends the sentence after each (repetition, or an inserted stop-word / [MASK]). These are the
    official `range(1, input_len-1)` (train.py:518): a special id inside the sentence, [UNK] above all, is a
    sub-word like the rest. Truncated to `max_length` keeping the final special token; padded to the batch."""

    def __init__(self, tokenizer, *, dup_rate: float, level: str = "subword", extension: str = "repetition",
                 sampling: str = "paper", seed: int = 0, max_length: int | None = None):
        self.dup_rate, self.level, self.extension, self.sampling = dup_rate, level, extension, sampling
        self.seed, self.max_length = seed, max_length
        self.pad_id, self.mask_id = tokenizer.pad_token_id, tokenizer.mask_token_id
        self.continues = word_continuation(tokenizer) if level == "word" else None
        self.stop_ids = single_token_ids(tokenizer, STOP_WORDS) if extension == "stopword" else None

    def units(self, ids: list[int]) -> list[tuple[int, int]]:
        """[start, end) spans of the selectable units in one unpadded row: each token at positions 1..len-2 (the
        official range(1, input_len-1): never the first token nor the final one), or each word among them (a word
        starts at position 1 or at a token that does not continue one)."""
        spans = []
        for i in range(1, len(ids) - 1):
            token = ids[i]
            joins = self.continues is not None and self.continues[token] and spans and spans[-1][1] == i
            if joins:
                spans[-1] = (spans[-1][0], i + 1)
            else:
                spans.append((i, i + 1))
        return spans

    def dup_len_bounds(self, units: int, length: int) -> tuple[int, int]:
        """(largest dup_len, how many leading units are candidates). length counts the special tokens."""
        if self.sampling == "paper":
            return min(units, max(2, math.floor(self.dup_rate * units))), units
        if self.level == "subword":  # train.py: randrange(min(10, int(dup_rate * len))) over positions 1..len-2
            return max(0, min(OFFICIAL_MAX_DUP, math.floor(self.dup_rate * length)) - 1), units
        # word path: randrange(min(10, n, max(2, int(dup_rate * n)))) over words 0..n-2 (never the last word)
        return max(0, min(OFFICIAL_MAX_DUP, units, max(2, math.floor(self.dup_rate * units))) - 1), max(0, units - 1)

    def most_added(self, length: int) -> int:
        """The most tokens a row of `length` tokens (special ones included) can gain: every unit of its body once,
        or, official sub-word sampling, fewer than OFFICIAL_MAX_DUP sub-words (what a fixed-shape step pads x+ to)."""
        body = max(0, length - 2)
        if self.sampling != "paper" and self.level == "subword":
            return min(OFFICIAL_MAX_DUP - 1, body)
        return body

    def draw(self, units: int, length: int, rng: torch.Generator | None) -> list[int]:
        """Sorted indices of the selected units."""
        top, candidates = self.dup_len_bounds(units, length)
        dup_len = min(int(torch.randint(top + 1, (), generator=rng)), candidates)
        return sorted(torch.randperm(candidates, generator=rng)[:dup_len].tolist())

    def row_rng(self, example_index: int | None) -> torch.Generator | None:
        """official: one generator per sentence, so its repetition is the same every epoch and every rerun;
        paper: the global RNG (checkpoints save its state, so a resumed run draws what it would have)."""
        if self.sampling == "paper":
            return None
        if example_index is None:
            raise ValueError("official-code repetition is fixed per sentence and needs the batch's example_index")
        key = hashlib.blake2b(f"{self.seed}:{example_index}".encode(), digest_size=4).digest()
        return torch.Generator().manual_seed(int.from_bytes(key, "little"))  # the CPU generator keeps 32 bits

    def extend_row(self, ids: list[int], rng) -> tuple[list[int], list[bool]]:
        """(new ids, inserted flags) of one sentence without padding."""
        spans = self.units(ids)
        chosen = {spans[u][1] - 1: spans[u] for u in self.draw(len(spans), len(ids), rng)}  # by last token
        out, inserted = [], []
        for i, token in enumerate(ids):
            out.append(token)
            inserted.append(False)
            if i not in chosen:
                continue
            start, end = chosen[i]
            if self.extension == "repetition":
                added = ids[start:end]
            elif self.extension == "stopword":
                added = [self.stop_ids[int(torch.randint(len(self.stop_ids), (), generator=rng))]]
            else:  # mask, masked_prediction
                added = [self.mask_id]
            out.extend(added)
            inserted.extend([self.extension == "masked_prediction"] * len(added))
        if self.max_length and len(out) > self.max_length:  # keep the final [SEP]
            out, inserted = out[:self.max_length - 1] + out[-1:], inserted[:self.max_length - 1] + inserted[-1:]
        return out, inserted

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 example_index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, inserted) of the extended batch, right-padded to its longest row."""
        lengths = attention_mask.sum(1).tolist()
        index = example_index.tolist() if example_index is not None else [None] * len(lengths)
        rows = [self.extend_row(ids[:n], self.row_rng(i))
                for ids, n, i in zip(input_ids.tolist(), lengths, index)]
        width = max(len(ids) for ids, _ in rows)
        out = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        inserted = torch.zeros(len(rows), width, dtype=torch.bool)
        for r, (ids, flags) in enumerate(rows):
            out[r, :len(ids)] = torch.tensor(ids)
            inserted[r, :len(ids)] = torch.tensor(flags)
        mask = (torch.arange(width) < torch.tensor([len(ids) for ids, _ in rows])[:, None]).long()
        device = input_ids.device
        return out.to(device), mask.to(device), inserted.to(device)


def _pad_to(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return nn.functional.pad(x, (0, width - x.shape[1]), value=value)


@register("esimcse")
class ESimCSE(SimCSE):
    """Batch: input_ids / attention_mask of shape (batch, 2, length), the sentence twice (as unsupervised SimCSE),
    and example_index (batch,). View 0 stays the original x; view 1 becomes the extended positive x+."""

    @dataclass
    class Options:
        """ESimCSE's settings (defaults: the paper's method; variant=official-code gives the official code's two
        choices)."""

        dup_rate: float = 0.32  # maximal repetition rate (Table 9)
        dup_level: str = "subword"  # subword (the method) | word (Table 5)
        length_extension: str = "repetition"  # repetition | stopword | mask | masked_prediction | none (Tables 4-6)
        momentum: float = 0.995  # EMA coefficient of the momentum encoder
        queue_size: int | None = None  # momentum queue length M; None: 2.5 x batch_size; 0: no momentum encoder
        variant: str = "paper"  # paper | official-code: the defaults of the two choices below
        dup_sampling: str | None = None  # paper (re-drawn each time, Eq. 3) | official (fixed per sentence)
        momentum_init: str | None = None  # encoder (paper) | random (official code)
        generator: str = "distilbert-base-uncased"  # the masked LM of length_extension=masked_prediction

        def __post_init__(self):
            if not 0 <= self.dup_rate <= 1:
                raise ValueError(f"dup_rate must be in [0, 1], got {self.dup_rate}")
            if not 0 <= self.momentum < 1:
                raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
            if self.queue_size is not None and self.queue_size < 0:
                raise ValueError(f"queue_size must be >= 0 (0: no momentum encoder) or unset (2.5 x batch_size), "
                                 f"got {self.queue_size}")
            check_choice("variant", self.variant, VARIANTS)
            for name, choices in CHOICES.items():
                check_choice(name, getattr(self, name), choices)

        def queue_length(self, batch_size: int) -> int:
            return round(QUEUE_PER_BATCH * batch_size) if self.queue_size is None else self.queue_size

    former_names = {"esimcse_variant": "variant"}

    def __init__(self, encoder: nn.Module, tokenizer, *, dup_rate: float = 0.32, dup_level: str = "subword",
                 length_extension: str = "repetition", dup_sampling: str = "paper", momentum: float = 0.995,
                 momentum_init: str = "encoder", queue_size: int = 160, seed: int = 42,
                 generator: nn.Module | None = None, max_length: int | None = None, **simcse_kwargs):
        super().__init__(encoder, **simcse_kwargs)
        for name, value in (("dup_level", dup_level), ("length_extension", length_extension),
                            ("dup_sampling", dup_sampling), ("momentum_init", momentum_init)):
            if value not in CHOICES[name]:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(CHOICES[name])}")
        if not 0 <= dup_rate <= 1:
            raise ValueError(f"dup_rate must be in [0, 1], got {dup_rate}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if queue_size < 0:
            raise ValueError(f"queue_size must be >= 0 (0: no momentum encoder), got {queue_size}")
        if (length_extension == "masked_prediction") != (generator is not None):
            raise ValueError("length_extension=masked_prediction needs an MLM generator, and only it takes one")
        self.momentum, self.queue_size = momentum, queue_size
        self.length_extension, self.pad_id = length_extension, tokenizer.pad_token_id
        self.extender = None if length_extension == "none" else LengthExtender(
            tokenizer, dup_rate=dup_rate, level=dup_level, extension=length_extension, sampling=dup_sampling,
            seed=seed, max_length=max_length)
        self.generator = generator.requires_grad_(False).eval() if generator is not None else None
        if queue_size:
            self.momentum_encoder = copy.deepcopy(encoder).requires_grad_(False).eval()
            if momentum_init == "random":
                with torch.random.fork_rng():
                    torch.manual_seed(seed)
                    for module in self.momentum_encoder.modules():
                        self.momentum_encoder._init_weights(module)
            hidden = encoder.config.hidden_size
            # persistent: the checkpoint (model.safetensors) keeps them, so a resumed run has the same queue
            self.register_buffer("queue", torch.zeros(queue_size, hidden))
            self.register_buffer("queue_filled", torch.zeros((), dtype=torch.long))
            self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_filled", None))
        self._filled = None  # queue_filled on the host (filled())

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "ESimCSE":
        options = cls.options_of(cfg)
        generator = None
        if options.length_extension == "masked_prediction":
            from .mlm_head import load_generator

            generator = load_generator(options.generator, cfg.data_dir)
        limit = encoder.config.max_position_embeddings - (2 if encoder.config.model_type == "roberta" else 0)
        return cls(encoder, tokenizer, dup_rate=options.dup_rate, dup_level=options.dup_level,
                   length_extension=options.length_extension, momentum=options.momentum,
                   queue_size=options.queue_length(cfg.batch_size), seed=cfg.seed, generator=generator,
                   max_length=limit, **variant_choices(options, VARIANTS), **cls.common_options(cfg))

    def train(self, mode: bool = True) -> "ESimCSE":
        super().train(mode)
        if self.queue_size:
            self.momentum_encoder.eval()  # dropout off always (paper §3.2)
        if self.generator is not None:
            self.generator.eval()
        return self

    def host_inputs(self, batch: dict) -> dict:
        """The extended sentences drawn on the host, from the batch's ids before they move (Python work per sentence
        that would otherwise wait for the device), in the order the step would draw them."""
        if self.extender is None or "input_ids" not in batch:
            return batch
        ids, mask, inserted = self.extender(batch["input_ids"][:, 0], batch["attention_mask"][:, 0],
                                            batch.get("example_index"))
        return {**batch, "extended_ids": ids, "extended_mask": mask, "extended_inserted": inserted}

    def compiled_modules(self) -> list[nn.Module]:
        """The encoder and the momentum encoder (a pass without gradients over the original sentences)."""
        return [self.encoder, *([self.momentum_encoder] if self.queue_size else [])]

    @torch.no_grad()
    def positive(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 example_index: torch.Tensor | None, extended: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x+ for each sentence x (ids and mask); extended: the extender's (ids, mask, inserted), drawn on the host."""
        if self.extender is None:
            return input_ids, attention_mask
        ids, mask, inserted = extended or self.extender(input_ids, attention_mask, example_index)
        # without asking whether anything was inserted (a read of the device): the generator runs in eval mode and
        # draws nothing, so a batch without insertions changes no number, it only costs a pass
        if self.generator is not None:
            hidden = generator_head_input(self.generator, ids, mask)[inserted]
            ids[inserted] = self.generator.get_output_embeddings()(hidden).argmax(-1)
        return ids, mask

    @torch.no_grad()
    def update_momentum_encoder(self) -> None:
        """θ_m ← m θ_m + (1 − m) θ in one fused update over all parameters."""
        torch._foreach_lerp_(list(self.momentum_encoder.parameters()), list(self.encoder.parameters()),
                             1.0 - self.momentum)

    @torch.no_grad()
    def momentum_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            chunk: int | None = None) -> torch.Tensor:
        """The momentum encoder's embedding of the original sentences through the online projector (in eval mode,
        as the official code's model.eval()), gathered from every process in rank order. `chunk`: that many rows
        at a time (gradient caching: no dropout and no graph here, so chunks change nothing but the memory)."""
        pooled = [pooled_output(self.momentum_encoder, self.pooler, input_ids=ids, attention_mask=mask)
                  for ids, mask in zip(input_ids.split(chunk or len(input_ids)),
                                       attention_mask.split(chunk or len(input_ids)))]
        projector_mode = self.projector.training
        self.projector.eval()
        try:
            z = self.projector(torch.cat(pooled))
        finally:
            self.projector.train(projector_mode)
        return gather_with_grad(z.float())

    @torch.no_grad()
    def enqueue(self, z: torch.Tensor) -> None:
        """FIFO, oldest first: the newest `queue_size` rows of (queue, z)."""
        kept = torch.cat([self.queue[:self.filled()], z.to(self.queue.dtype)])[-self.queue_size:]
        self.queue[:len(kept)] = kept
        self.queue_filled.fill_(len(kept))
        self._filled = len(kept)

    def filled(self) -> int:
        """The queue's rows, as queue_filled holds them, counted on the host (read from the device once, after the
        objective is built or its state loaded)."""
        if self._filled is None:
            self._filled = int(self.queue_filled)
        return self._filled

    def pair(self, batch: dict) -> dict:
        """(x, x+) as the two views of each row, padded to one width, with the original sentence x on its own
        (`original_ids`, `original_mask`: what the momentum encoder reads)."""
        if batch["input_ids"].shape[1] != 2:
            raise ValueError(f"ESimCSE trains on unlabelled sentences (2 views); got {batch['input_ids'].shape[1]}")
        ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
        extended = (batch["extended_ids"], batch["extended_mask"], batch["extended_inserted"]) \
            if "extended_ids" in batch else None
        pos_ids, pos_mask = self.positive(ids, mask, batch.get("example_index"), extended)
        padding, fixed = self.padding
        most = fixed + self.extender.most_added(fixed) if fixed is not None and self.extender is not None else fixed
        width = pad_length(max(ids.shape[1], pos_ids.shape[1]), padding, most)
        return {"input_ids": torch.stack([_pad_to(ids, width, self.pad_id), _pad_to(pos_ids, width, self.pad_id)], 1),
                "attention_mask": torch.stack([_pad_to(mask, width, 0), _pad_to(pos_mask, width, 0)], 1),
                "original_ids": ids, "original_mask": mask, "positive_mask": pos_mask}

    def pair_loss(self, pair: dict, projected: torch.Tensor, chunk: int | None = None) -> dict:
        """InfoNCE of the pair with the queue's negatives, the momentum encoder moved and the queue filled once."""
        z = projected.view(-1, 2, projected.shape[-1])
        negatives = None
        if self.queue_size:
            # the official order: after the online forward, before the loss and this step's optimizer update, so
            # the momentum encoder moves towards the weights that produced this step's embeddings
            self.update_momentum_encoder()
            filled = self.filled()
            negatives = self.queue[:filled].clone() if filled else None  # the first step has no queue
        loss = self.info_nce(z[:, 0], z[:, 1], queue=negatives)
        ids, mask = pair["original_ids"], pair["original_mask"]
        out = {"loss": loss, "contrastive": loss.detach(),
               "added_tokens": (pair["positive_mask"].sum() - mask.sum()).float() / len(ids)}
        if self.queue_size:
            self.enqueue(self.momentum_embeddings(ids, mask, chunk))
            out["queue"] = self.queue_filled.float()
        return out

    def forward(self, batch: dict) -> dict:
        pair = self.pair(batch)
        _, projected = self.encode_views(pair)
        return self.pair_loss(pair, projected)

    # --- gradient caching: the repetitions drawn for the whole batch, the queue and the momentum update once per
    # step, in the loss ---

    def cache_inputs(self, batch: dict) -> dict:
        return {"main": self.pair(batch)}

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        out = self.pair_loss(inputs["main"], self.projector(reps["main"].flatten(0, 1)), chunk)
        return out["loss"], out
