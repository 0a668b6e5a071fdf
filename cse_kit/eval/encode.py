"""Sentence encoding for evaluation: poolers, length-sorted batches, one encoding per distinct sentence."""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..environment import cpu_bf16_unit
from .prompt import (PROMPTBERT_BERT, PromptReading, Template, first_position, mask_states, sentence_lengths,
                      with_period)


@dataclass(frozen=True)
class Pooler:
    """One way of reading a sentence vector off a transformers model, declared once: the encoder, the methods'
    training passes and the sentence-transformers export all read this declaration (POOLERS). The pooler is part of
    every result; it is never guessed."""

    name: str
    description: str  # what it reads off the model, as `cse-kit eval --help` lists it
    read: Callable[[Any, torch.Tensor], torch.Tensor]  # (model output, attention mask) -> (rows, hidden)
    reads_all_layers: bool = False  # the model must return every layer's hidden states (output_hidden_states)
    st_pooling_mode: str | None = None  # sentence-transformers' Pooling mode computing the same vector; None: none
    reads_prompt: bool = False  # read at a prompt template's [MASK] by the Encoder (its template and denoising)

    def __str__(self) -> str:
        return self.description


#: name -> its declaration (add_pooler); every pooler the kit knows
POOLERS: dict[str, Pooler] = {}


def add_pooler(pooler: Pooler) -> Pooler:
    """Declare a pooler: from then on it is a choice of `--pooler`, of a run's `pooler` and of the export."""
    if pooler.name in POOLERS:
        raise ValueError(f"pooler {pooler.name!r} is declared already")
    POOLERS[pooler.name] = pooler
    return pooler


def _masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1)


def _model_pooler(outputs, attention_mask: torch.Tensor) -> torch.Tensor:
    if getattr(outputs, "pooler_output", None) is None:
        raise ValueError("pooler 'cls' needs the model's pooler layer, and this model has none "
                         "(add_pooling_layer=False); use 'cls_before_pooler'")
    return outputs.pooler_output


def _first_token(outputs, attention_mask: torch.Tensor) -> torch.Tensor:
    return outputs.last_hidden_state[:, 0]


def _last_layer_mean(outputs, attention_mask: torch.Tensor) -> torch.Tensor:
    return _masked_mean(outputs.last_hidden_state, attention_mask)


def _two_layer_mean(first: int, last: int):
    """The mean over tokens of the average of hidden_states[first] and hidden_states[last]."""
    def read(outputs, attention_mask: torch.Tensor) -> torch.Tensor:
        hs = outputs.hidden_states
        return _masked_mean((hs[first] + hs[last]) / 2.0, attention_mask)
    return read


def _template_mask(name: str):
    """A prompt pooler's read outside the Encoder: refused, as it needs the template."""
    def read(outputs, attention_mask: torch.Tensor) -> torch.Tensor:
        raise ValueError(f"pooler {name!r} reads a prompt template's [MASK]: encode through Encoder")
    return read


for _pooler in (
    Pooler("cls", "[CLS] through the model's pooler (pooler_output: BERT's NSP pooler, or a SimCSE MLP after "
                  "conversion)", _model_pooler),
    Pooler("cls_before_pooler", "raw [CLS] of the last layer (unsupervised SimCSE/DiffCSE at test time)",
           _first_token, st_pooling_mode="cls"),
    Pooler("avg", "mean of the last layer over non-padding tokens", _last_layer_mean, st_pooling_mode="mean"),
    Pooler("avg_top2", "mean over tokens of the average of the last two layers", _two_layer_mean(-2, -1),
           reads_all_layers=True),
    Pooler("avg_first_last", "mean over tokens of (first transformer layer + last layer) / 2: hidden_states[1], as "
                             "SimCSE's evaluation.py since 2022-01", _two_layer_mean(1, -1), reads_all_layers=True),
    Pooler("avg_emb_last", "mean over tokens of (embedding output + last layer) / 2: hidden_states[0], what DiffCSE, "
                           "SCD and ESimCSE's evaluation.py call avg_first_last", _two_layer_mean(0, -1),
           reads_all_layers=True),
    Pooler("prompt_mask", "last layer at [MASK] of a prompt template (PromptBERT; DiffAug at test time), default "
                          "template 'This sentence of \"[X]\" means [MASK] .'", _template_mask("prompt_mask"),
           reads_prompt=True),
    Pooler("prompt_mask_denoised", "prompt_mask minus the [MASK] state of the empty template at the sentence's "
                                   "length, its positions from 0 unless the model's cse_kit.json says otherwise "
                                   "(PromptBERT's template denoising)", _template_mask("prompt_mask_denoised"),
           reads_prompt=True),
):
    add_pooler(_pooler)
#: the poolers the Encoder reads at a template's [MASK] (its own template and denoising code: these two only)
PROMPT_POOLERS = tuple(name for name, pooler in POOLERS.items() if pooler.reads_prompt)


#: (tokenizer, max_length) -> text -> token ids: every run a notebook evaluates encodes the same STS and transfer
#: sentences, and tokenizing them was a third of a smoke run's evaluation (1.2 s of 26k STS test sentences)
_TOKEN_IDS: dict[tuple, dict[str, np.ndarray]] = {}


def _tokenizer_key(tokenizer, max_length: int | None, special_tokens: bool = True) -> tuple:
    """What decides a text's ids: the tokenizer's definition (a fast tokenizer's serialised pipeline, with its
    vocabulary, normaliser and special tokens; a slow one's vocabulary), its class and special tokens, the length
    cap. Not its path: every trained model is saved with its own copy of the tokenizer, and a path key tokenized the
    evaluation sentences again for every run (1.1 s of a 5 s smoke run)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return (type(tokenizer).__name__, hashlib.sha256(definition.encode()).hexdigest(), len(tokenizer),
            tuple(sorted(tokenizer.special_tokens_map.items(), key=str)), max_length, special_tokens)


def token_ids(tokenizer, texts: list[str], max_length: int | None = None,
              special_tokens: bool = True) -> list[np.ndarray]:
    """The texts' input ids, with special tokens unless special_tokens=False (truncated to max_length when given),
    each text tokenized once per process and tokenizer; kept as int32 arrays (a fifth of the memory of Python
    lists)."""
    known = _TOKEN_IDS.setdefault(_tokenizer_key(tokenizer, max_length, special_tokens), {})
    new = [t for t in dict.fromkeys(texts) if t not in known]
    if new:
        ids = tokenizer(new, add_special_tokens=special_tokens, truncation=max_length is not None,
                        max_length=max_length)["input_ids"]
        known.update(zip(new, (np.asarray(x, dtype=np.int32) for x in ids)))
    return [known[t] for t in texts]


def check_pooler(pooler: str) -> str:
    if pooler not in POOLERS:
        raise ValueError(f"unknown pooler {pooler!r}; choose one of: {', '.join(POOLERS)}")
    return pooler


def pool(outputs, attention_mask: torch.Tensor, pooler: str) -> torch.Tensor:
    """The pooler's vectors of a transformers model output (with hidden states where it reads them). The prompt
    poolers read a template's [MASK]: the Encoder's `_prompt_vectors`."""
    return POOLERS[check_pooler(pooler)].read(outputs, attention_mask)


def pooled_output(model, pooler: str, pool_mask: torch.Tensor | None = None, **inputs) -> torch.Tensor:
    """(rows, hidden): the pooler's vectors of one pass of `model` over `inputs`, every layer's states asked for
    only where the pooler reads them; a mean is taken over `pool_mask` (default: the attention mask)."""
    outputs = model(**inputs, output_hidden_states=POOLERS[check_pooler(pooler)].reads_all_layers)
    return pool(outputs, inputs["attention_mask"] if pool_mask is None else pool_mask, pooler)


#: tokens per batch on CUDA by default (padded size): BERT-base's activations at this size take well under 1 GB
GPU_TOKEN_BUDGET = 16384


def length_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None) -> list[np.ndarray]:
    """Indices of lengths, longest first (memory errors show up at once), cut into batches of at most batch_size
    rows, or, with max_tokens, of as many rows as fit max_tokens once padded to the batch's longest."""
    order = np.argsort(-lengths, kind="stable")
    if max_tokens is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    batches, i = [], 0
    while i < len(order):
        rows = max(1, max_tokens // int(lengths[order[i]]))  # the first row is the batch's longest
        batches.append(order[i:i + rows])
        i += rows
    return batches


#: the lengths `pad_to=buckets` pads a training batch to: the smallest that holds its longest row (the data's
#: longest above them)
BUCKET_LENGTHS = (8, 16, 32, 64, 128, 256, 512)


def pad_length(longest: int, padding: str, fixed: int | None) -> int:
    """The length a batch whose longest row is `longest` is padded to: its own (longest), the data's longest row
    `fixed` (fixed), or the next of BUCKET_LENGTHS, at most `fixed` (buckets)."""
    if padding == "longest" or fixed is None:
        return longest
    if padding == "fixed":
        return max(fixed, longest)
    return min(next((b for b in BUCKET_LENGTHS if b >= longest), longest), max(fixed, longest))


def pad_ids(ids: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask, right-padded to the longest (what tokenizer.pad does, without its per-call
    Python overhead)."""
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    out = np.full((len(ids), int(lengths.max())), pad_id, dtype=np.int64)
    mask = np.arange(out.shape[1]) < lengths[:, None]
    out[mask] = np.concatenate(ids)
    return torch.from_numpy(out), torch.from_numpy(mask.astype(np.int64))


class Encoder:
    """Encodes sentences with a model and a pooler, each distinct sentence once (embeddings are kept until
    `clear()`), in batches of similar length, without truncation unless max_length is given (as SentEval).
    fp32, as the papers' SentEval: AMP only when amp=True (on CUDA bf16 where supported, else fp16; on a CPU with a
    bf16 unit, AMX or AVX512-BF16, bf16; elsewhere fp32 and amp False), recorded with the result (on an H100 it moved
    transfer accuracy by up to 0.8 points).

    The prompt poolers read `template`: a template text (filled with text, denoised from position 0, no head: the
    official evaluation.py's defaults) or a PromptReading (cse_kit.eval.prompt), as a kit-trained model's cse_kit.json
    states it (cse_kit.train.export.ExportSettings)."""

    def __init__(self, model, tokenizer, pooler: str, *, batch_size: int = 128, max_tokens: int | None = None,
                 max_length: int | None = None, device: str | torch.device | None = None, amp: bool = False,
                 progress: bool = True, template: str | PromptReading | None = None):
        from ..models import newly_initialized

        self.pooler = check_pooler(pooler)
        if pooler == "cls" and any(k.startswith("pooler.") for k in newly_initialized(model)):
            raise ValueError("pooler 'cls' reads BERT's pooler layer, which this model was saved without (its weights "
                             "would be random; kit-trained encoders are exported without it): use cls_before_pooler")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        # a GPU is kept busy by batches of a token budget (many short sentences, few long ones); on CPU a fixed
        # count is as fast and keeps today's numbers bit for bit
        self.max_tokens = max_tokens if max_tokens is not None else (
            GPU_TOKEN_BUDGET if self.device.type == "cuda" else None)
        self.max_length = max_length
        # on a CPU, bf16 autocast only where a unit multiplies bf16 (AMX, AVX512-BF16): emulated it is slower than fp32
        self.amp = amp and (self.device.type == "cuda" or (self.device.type == "cpu" and cpu_bf16_unit() is not None))
        self.progress = progress
        self.reading = template if isinstance(template, PromptReading) else PromptReading(template or PROMPTBERT_BERT)
        self.template = Template(tokenizer, self.reading.template) if POOLERS[pooler].reads_prompt else None
        # a trained head holds no dropout: the objective's own module is read as it is during training (where it
        # already has the encoder's device and dtype); a loaded one gets them
        self.head = self.reading.head.to(self.device, next(model.parameters()).dtype) \
            if self.template and self.reading.head else None
        self._deltas: dict[int, torch.Tensor] = {}  # empty-template [MASK] state by sentence length
        self.seconds = 0.0  # time spent encoding (tokenization included)
        self._cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    @property
    def precision(self) -> str:
        """What the matrix products run in: bf16 or fp16 under AMP, else fp32."""
        if not self.amp:
            return "fp32"
        return "fp16" if self.device.type == "cuda" and not torch.cuda.is_bf16_supported() else "bf16"

    def amp_line(self) -> str:
        """What an opt-in to AMP resolved to, in one line for the terminal (the result records `precision`)."""
        if self.amp:
            unit = "the GPU" if self.device.type == "cuda" else f"this CPU's {cpu_bf16_unit()} unit"
            return (f"--amp: encoding under {self.precision} autocast on {unit}; the numbers can move from the papers' "
                    "fp32 protocol (docs/evaluation.md)")
        return ("--amp: encoding in fp32, the papers' protocol: this CPU has no unit that multiplies bf16 natively "
                "(AMX-BF16, AVX512-BF16), and emulated bf16 is slower than fp32")

    def clear(self) -> None:
        self._cache.clear()
        self._deltas.clear()

    def _head_before(self, states: torch.Tensor) -> torch.Tensor:
        return self.head(states) if self.reading.head_kind == "mlm_transform" else states

    def _denoise(self, pooled: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Minus the empty template's [MASK] state at each sentence's length (through a head that reads before the
        subtraction), computed once per length. Its positions start after the model's prefix, if it has one, and
        from the position of a row's first token when the reading says "sentence"."""
        lengths = sentence_lengths(attention_mask, self.template)
        missing = sorted(set(lengths.tolist()) - set(self._deltas))
        if missing:
            offset = getattr(self.model, "prefix_length", 0)
            if self.reading.denoise_positions == "sentence":
                offset += first_position(self.model)
            ids, positions = self.template.denoising_inputs(torch.tensor(missing, device=pooled.device), offset=offset)
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                             return_dict=True)
            states = self._head_before(mask_states(out.last_hidden_state, ids, self.template.mask_token_id))
            for n, row in zip(missing, states):
                self._deltas[n] = row
        return pooled - torch.stack([self._deltas[n] for n in lengths.tolist()])

    def _prompt_vectors(self, out, batch: dict) -> torch.Tensor:
        """The [MASK] state, through the reading's head before or after the denoising (PromptBERT's
        evaluation.py:292-307)."""
        vectors = self._head_before(mask_states(out.last_hidden_state, batch["input_ids"], self.template.mask_token_id))
        if self.pooler == "prompt_mask_denoised":
            vectors = self._denoise(vectors, batch["attention_mask"])
        return self.head(vectors) if self.reading.head_kind == "mlp" else vectors

    def _token_ids(self, sentences: list[str]) -> list[np.ndarray]:
        """Each sentence's input ids: in the template when the pooler reads one, filled with text and tokenized
        whole (evaluation.py:193-233 of PromptBERT, :79-87 of DiffAug) or its own sub-words wrapped in the
        template's ids (PromptBERT's dev evaluation, models.py:307-335)."""
        if not self.template:
            return token_ids(self.tokenizer, sentences, self.max_length)
        if self.reading.append_period:
            sentences = [with_period(s) for s in sentences]
        if self.reading.fill == "ids":
            return [np.asarray(self.template.wrap_ids(x), dtype=np.int32)
                    for x in token_ids(self.tokenizer, sentences, self.max_length, special_tokens=False)]
        return token_ids(self.tokenizer, [self.template.wrap_text(s) for s in sentences], self.max_length)

    def _autocast(self):
        if not self.amp:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.float16 if self.precision == "fp16" else torch.bfloat16)

    def _encode_new(self, sentences: list[str]) -> None:
        from tqdm import tqdm

        start = time.perf_counter()
        ids = self._token_ids(sentences)
        batches = length_batches(np.array([len(x) for x in ids]), self.batch_size, self.max_tokens)
        need_hidden = POOLERS[self.pooler].reads_all_layers
        cuda = self.device.type == "cuda"
        pooled = []  # kept on the device and copied once at the end: no host sync per batch
        # the bar counts padded tokens, the work a batch costs: in sentences its rate swung tenfold from the longest
        # batches (encoded first) to the shortest, and the ETA with it
        work = sum(len(chunk) * max(len(ids[j]) for j in chunk) for chunk in batches)
        with torch.inference_mode(), self._autocast(), tqdm(total=work, unit="tok", unit_scale=True,
                                                           desc=f"encoding {len(sentences)} sentences",
                                                           disable=not self.progress) as bar:
            for chunk in batches:
                input_ids, mask = pad_ids([ids[j] for j in chunk], self.tokenizer.pad_token_id)
                if cuda:
                    input_ids, mask = input_ids.pin_memory(), mask.pin_memory()
                batch = {"input_ids": input_ids.to(self.device, non_blocking=True),
                         "attention_mask": mask.to(self.device, non_blocking=True)}
                out = self.model(**batch, output_hidden_states=need_hidden, return_dict=True)
                if self.template:
                    vectors = self._prompt_vectors(out, batch)
                else:
                    vectors = pool(out, batch["attention_mask"], self.pooler)
                pooled.append(vectors.float())
                bar.update(input_ids.numel())
        embeddings = torch.cat(pooled).cpu().numpy()
        for j, row in zip(np.concatenate(batches), embeddings):
            self._cache[sentences[j]] = row
        self.seconds += time.perf_counter() - start

    def encode(self, sentences) -> np.ndarray:
        """(len(sentences), dim) float32; sentences already encoded are not encoded again."""
        new = list(dict.fromkeys(s for s in sentences if s not in self._cache))
        if new:
            self._encode_new(new)
        if not len(sentences):
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[s] for s in sentences])
