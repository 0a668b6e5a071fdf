"""PromptBERT (Jiang et al., EMNLP 2022): a sentence is the [MASK] state of a hard template (cse_kit.eval.prompt), minus
the template's own [MASK] state (template denoising: the empty template at the sentence's positions).

Unsupervised: the two views of a sentence are the sentence in two different templates, each denoised with its own
template, through a training-only Linear + tanh MLP, InfoNCE at τ. Supervised: NLI triplets (anchor, entailment,
contradiction as hard negative), as the official supervised scripts: one template, denoising, and a head that the
official evaluation keeps (sup-bert: BERT's pretrained MLM-head transform, applied before the denoising;
sup-roberta: the MLP after it). The exported model is the plain encoder; `pooler` and the test reading
(cse_kit.eval.prompt.PromptReading, in its cse_kit.json, with the head's weights beside it where it keeps one) say how it
is read at test time.

Batches hold every view wrapped in the first template (`cfg.template`, cse_kit.train.data.tokenize). The second
template is applied here, by re-wrapping the views after the first (`rewrap`): the data layer stays one template
for every method, and the sentence's sub-words are the same in both views, as the official prepare_features builds
them (train.py:686-693)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..eval.encode import PROMPT_POOLERS
from ..eval.prompt import PROMPTBERT_BERT, PromptReading, Template, first_position, mask_states
from .contrastive import MLPProjector, init_like_official, official_share
from .objective import Objective, check_choice, variant_choices
from .registry import register

#: The official run scripts' template pairs in the kit's notation (Template): BERT run.sh:98-99, RoBERTa run.sh:80-81
#: (the supervised scripts use the first alone: run.sh:116, 131). The first is also the test template (run.sh:106-107,
#: 88-89). RoBERTa's words are spaced as train.py:626-629 leaves them: the text before the sentence stripped, the text
#: after it starting with a blank.
TEMPLATES = {"bert": (PROMPTBERT_BERT, 'This sentence : "*sent0*" means*mask*.'),
             "roberta": ("This sentence : ' *sent0* ' means*mask*.", "The sentence : ' *sent0* ' means*mask*.")}

#: choice -> its values. denoise_positions: the position ids of the empty template that is subtracted: those its
#: tokens have in the sentence's input ("sentence": the paper's template denoising; RoBERTa counts positions from
#: padding_idx + 1) or 0, 1, ... whatever the model ("from-zero": get_delta's torch.arange, models.py:96, and
#: evaluation.py:57). The two agree for BERT; the test and dev vectors' denoising follows the choice.
#: promptbert_test: the exported test vector, "plain" (the sentence as given, no head: the kit's one protocol) or
#: "official" (evaluation.py with run.sh's eargs: "." appended to a sentence without final punctuation, :201, and
#: the trained head where the supervised scripts keep it, :104-117, 295-307).
#: promptbert_dev: the checkpoint-selection vector, "test" (the test vector) or "official" (the trainer's dev
#: evaluation, trainers.py:105-117 through sentemb_forward, models.py:275-375: the sentence's own sub-words wrapped
#: in the template's ids, no ".", denoised whenever training denoises, :290-303, 364-368, through the head unless
#: --mlp_only_train, :366-375).
CHOICES = {"denoise_positions": ("sentence", "from-zero"), "promptbert_test": ("plain", "official"),
           "promptbert_dev": ("test", "official")}
VARIANTS = {"paper": {"denoise_positions": "sentence", "promptbert_test": "plain", "promptbert_dev": "test"},
            "official-code": {"denoise_positions": "from-zero", "promptbert_test": "official",
                              "promptbert_dev": "official"}}
#: the option of each choice whose name differs
OPTION_OF = {"promptbert_test": "test_vector", "promptbert_dev": "dev_vector"}


def rewrap(input_ids: torch.Tensor, attention_mask: torch.Tensor, source: Template, target: Template,
           pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of (rows, length) sentences wrapped in `source`, wrapped in `target` instead
    (right-padded, width changed by the templates' difference). Tensor ops only: no host sync in the step."""
    rows, width = input_ids.shape
    lengths = (attention_mask.sum(-1) - len(source)).unsqueeze(1)
    pos = torch.arange(width - len(source) + len(target), device=input_ids.device).expand(rows, -1)
    start, end = len(target.before), len(target.before) + lengths
    out = input_ids.gather(1, (pos - start + len(source.before)).clamp(0, width - 1))  # the sentence's sub-words
    before = torch.tensor(target.before, device=input_ids.device)
    after = torch.tensor(target.after, device=input_ids.device)
    out = torch.where(pos < start, before[pos.clamp(max=start - 1)], out)
    out = torch.where(pos >= end, after[(pos - end).clamp(0, len(after) - 1)], out)
    mask = pos < end + len(after)
    return torch.where(mask, out, pad_id), mask.long()


def bert_mlm_transform(ref: str, data_dir=None) -> nn.Module:
    """BERT's pretrained MLM-head transform (dense, activation, LayerNorm) from checkpoint `ref`, as the official
    sup-bert run takes it (--mask_embedding_sentence_org_mlp, train.py:581-584). A checkpoint without an MLM head
    gives a freshly initialised one, with the loader's warning, as there."""
    from transformers import BertForMaskedLM

    from ..models import load_model

    return load_model(ref, model_class=BertForMaskedLM, data_dir=data_dir)[1].cls.predictions.transform


@register("promptbert")
class PromptBERT(Objective):
    """Batch: input_ids / attention_mask (batch, views, length) of template-wrapped ids: 2 views (the sentence
    twice: unsupervised) or 3 (anchor, entailment, contradiction: supervised). View 0 stays in `template`; with
    `template2` the other views are re-wrapped in it (the official code does so for views 1 and 2:
    train.py:688-693, models.py:170-174)."""

    @dataclass
    class Options:
        """PromptBERT's settings (defaults: the paper; variant=official-code gives the official code's choices). It
        also reads the run's template (view 0's, and the test template), projector (mlp: Linear + tanh after the
        denoising, training only | none) and pooler (prompt_mask | prompt_mask_denoised: the test vector)."""

        template2: str | None = None  # the other views' template (unsupervised: the positive's); None: all in template
        mlm_transform: bool = False  # BERT's pretrained MLM-head transform before the denoising (official sup-bert)
        denoise: bool = True  # template denoising in training
        variant: str = "paper"  # paper | official-code: the defaults of the three choices below
        denoise_positions: str | None = None  # sentence (paper) | from-zero (official code)
        test_vector: str | None = None  # the exported test vector: plain (paper) | official (evaluation.py's)
        dev_vector: str | None = None  # the checkpoint selection's vector: test (paper) | official (the trainer's)

        def __post_init__(self):
            check_choice("variant", self.variant, VARIANTS)
            for name, choices in CHOICES.items():
                check_choice(name, getattr(self, OPTION_OF.get(name, name)), choices)

        def choices(self) -> dict:
            return variant_choices(self, VARIANTS, OPTION_OF)

    former_names = {"promptbert_variant": "variant", "promptbert_test": "test_vector", "promptbert_dev": "dev_vector"}

    @classmethod
    def check_run(cls, cfg) -> None:
        if not (cfg.template and cfg.pooler in PROMPT_POOLERS):
            raise ValueError("PromptBERT reads the [MASK] of a prompt template: set a template and "
                             f"pooler={' or '.join(PROMPT_POOLERS)}")
        if cfg.projector not in ("mlp", "none"):
            raise ValueError(f"PromptBERT's training head is projector=mlp (Linear + tanh) or none, got "
                             f"{cfg.projector!r}")
        if cfg.method_options["mlm_transform"] and cfg.projector == "mlp":
            raise ValueError("mlm_transform replaces the MLP as the official code's head (models.py:57-61): set "
                             "projector=none with it")

    def __init__(self, encoder: nn.Module, tokenizer, *, template: str = PROMPTBERT_BERT, template2: str | None = None,
                 temp: float = 0.05, denoise: bool = True, mlp: bool = True, mlm_transform: nn.Module | None = None,
                 hard_negative_weight: float = 0.0, pooler: str = "prompt_mask", denoise_positions: str = "sentence",
                 promptbert_test: str = "plain", promptbert_dev: str = "test", official_processes: int = 1):
        for name, value in (("denoise_positions", denoise_positions), ("promptbert_test", promptbert_test),
                            ("promptbert_dev", promptbert_dev)):
            if value not in CHOICES[name]:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(CHOICES[name])}")
        if pooler not in PROMPT_POOLERS:
            raise ValueError(f"PromptBERT is read at a template's [MASK]: pooler must be one of "
                             f"{', '.join(PROMPT_POOLERS)}, got {pooler!r}")
        if mlp and mlm_transform is not None:
            raise ValueError("the official code has one head: the MLM-head transform replaces the MLP "
                             "(models.py:57-61); use projector=none with mlm_transform")
        # its heads (below) stand in for a training projector
        super().__init__(encoder, pooler=pooler, projector=None, temp=temp, tokenizer=tokenizer)
        self.template = Template(tokenizer, template)
        self.template2 = Template(tokenizer, template2) if template2 else None
        self.pad_id, self.denoise = tokenizer.pad_token_id, denoise
        self.hard_negative_weight = hard_negative_weight
        self.denoise_positions = denoise_positions
        self.position_offset = first_position(encoder) if denoise_positions == "sentence" else 0
        self.official_test, self.official_dev = promptbert_test == "official", promptbert_dev == "official"
        # official heads: the pretrained MLM transform on every [MASK] state before the denoising (models.py:106-107,
        # 163-164), or the MLPLayer after it (:187-191), initialised by cl_init's init_weights() (:61-63)
        self.mlm_transform = mlm_transform if mlm_transform is not None else nn.Identity()
        config = encoder.config
        self.mlp = init_like_official(MLPProjector(config.hidden_size), getattr(config, "initializer_range", 0.02)) \
            if mlp else nn.Identity()
        self.official_processes = official_processes  # the official run's process count (official_share)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "PromptBERT":
        options = cls.options_of(cfg)
        transform = None
        if options.mlm_transform:
            if encoder.config.model_type != "bert":
                raise ValueError(f"mlm_transform is BERT's MLM-head transform (the official code loads it for BERT "
                                 f"only, train.py:581-584); {cfg.model} is {encoder.config.model_type}")
            transform = bert_mlm_transform(cfg.model, cfg.data_dir)
        return cls(encoder, tokenizer, template=cfg.template, template2=options.template2, temp=cfg.temp,
                   denoise=options.denoise, mlp=cfg.projector == "mlp", mlm_transform=transform,
                   hard_negative_weight=cfg.hard_negative_weight, pooler=cfg.pooler,
                   official_processes=cfg.official_processes, **options.choices())

    def template_states(self, template: Template, lengths: torch.Tensor) -> torch.Tensor:
        """(len(lengths), hidden): the empty template's [MASK] state, its positions after the sentence slot moved by
        each sentence's length, through the MLM transform if there is one. One row per length present, so sentences
        of one length share a row (and its dropout draw), as the official delta[blen] (models.py:78-108, 170-177);
        with dropout and gradient, as there."""
        needed, index = torch.unique(lengths, return_inverse=True)
        ids, positions = template.denoising_inputs(needed, offset=self.position_offset)
        out = self.encoder(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions, return_dict=True)
        return self.mlm_transform(mask_states(out.last_hidden_state, ids, template.mask_token_id))[index]

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, second_template: bool = True):
        """(rows, views, hidden): each view's training vector. View 0 in `template`, the others in `template2` when
        second_template and there is one; all rows in one encoder pass (each its own dropout mask)."""
        states = self.view_states(input_ids, attention_mask, second_template)
        return self.head(states, attention_mask, second_template)

    def _split(self, views: int, second_template: bool) -> int:
        """How many views (from the first) are in the first template."""
        return 1 if second_template and self.template2 is not None else views

    def view_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, second_template: bool = True):
        """(rows, views, hidden): each view's [MASK] state (through the MLM transform, where there is one), before
        the denoising and the MLP."""
        rows, views, _ = input_ids.shape
        split = self._split(views, second_template)
        groups = [(input_ids[:, :split].flatten(0, 1), attention_mask[:, :split].flatten(0, 1))]
        if split < views:
            groups.append(rewrap(input_ids[:, split:].flatten(0, 1), attention_mask[:, split:].flatten(0, 1),
                                 self.template, self.template2, self.pad_id))
        width = max(ids.shape[1] for ids, _ in groups)
        ids = torch.cat([F.pad(i, (0, width - i.shape[1]), value=self.pad_id) for i, _ in groups])
        mask = torch.cat([F.pad(m, (0, width - m.shape[1])) for _, m in groups])
        out = self.encoder(input_ids=ids, attention_mask=mask, return_dict=True)
        states = self.mlm_transform(mask_states(out.last_hidden_state, ids, self.template.mask_token_id))
        first, rest = states.split([rows * split, rows * (views - split)])
        return torch.cat([first.view(rows, split, -1), rest.view(rows, views - split, first.shape[-1])], 1)

    def head(self, states: torch.Tensor, attention_mask: torch.Tensor, second_template: bool = True):
        """(rows, views, hidden): the [MASK] states denoised (each view minus its template's empty state for the
        sentence's length, one encoder pass per template) and through the MLP. `attention_mask`: the batch's, in
        the first template."""
        rows, views, hidden = states.shape
        split = self._split(views, second_template)
        if self.denoise:
            lengths = attention_mask.sum(-1) - len(self.template)  # the sentence's sub-words, the same in both
            parts = [(states[:, :split], lengths[:, :split], self.template)]
            if split < views:
                parts.append((states[:, split:], lengths[:, split:], self.template2))
            states = torch.cat([s - self.template_states(t, n.flatten()).view_as(s) for s, n, t in parts], 1)
        return self.mlp(states.flatten(0, 1)).view(rows, views, hidden)

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): the vector training represents a sentence by, every view in the first template
        (what the semi-supervised strategies' NLI head reads, cse_kit.methods.semi)."""
        return self.vectors(batch["input_ids"], batch["attention_mask"], second_template=False)

    @staticmethod
    def check_views(batch: dict) -> None:
        views = batch["input_ids"].shape[1]
        if views not in (2, 3):
            raise ValueError(f"PromptBERT needs 2 views (unsupervised) or 3 (anchor, entailment, contradiction); "
                             f"got {views}")

    def views_loss(self, z: torch.Tensor) -> dict:
        """InfoNCE of the (rows, views, hidden) training vectors, the third view a hard negative."""
        loss = self.info_nce(z[:, 0], z[:, 1], z[:, 2] if z.shape[1] == 3 else None,
                             hard_negative_weight=self.hard_negative_weight)
        return {"loss": official_share(loss, self.official_processes), "contrastive": loss.detach()}

    def forward(self, batch: dict) -> dict:
        self.check_views(batch)
        return self.views_loss(self.vectors(batch["input_ids"], batch["attention_mask"]))

    # --- gradient caching (cse_kit.methods.grad_cache): the [MASK] states chunk by chunk; the denoising (one pass
    # of the empty templates for the batch's lengths), the MLP and InfoNCE on the whole batch ---

    def cache_inputs(self, batch: dict) -> dict:
        self.check_views(batch)
        return {"main": {k: batch[k] for k in ("input_ids", "attention_mask")}}

    def cache_encode(self, stream: str, inputs: dict) -> torch.Tensor:
        return self.view_states(inputs["input_ids"], inputs["attention_mask"])

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        out = self.views_loss(self.head(reps["main"], inputs["main"]["attention_mask"]))
        return out["loss"], out

    def _head(self) -> tuple[nn.Module | None, str | None]:
        """The trained head the official evaluation keeps, and its kind (cse_kit.eval.prompt.PROMPT_HEADS), or (None,
        None). The official scripts keep it exactly where they test denoised: the supervised ones (eargs
        --mask_embedding_sentence_org_mlp / _use_pooler with _delta, run.sh:120-123, 137-140); the unsupervised ones
        train with --mlp_only_train (run.sh:83, 101) and test the raw state (:88-89, 106-107)."""
        if self.test_pooler != "prompt_mask_denoised":
            return None, None
        if not isinstance(self.mlm_transform, nn.Identity):
            return self.mlm_transform, "mlm_transform"
        if not isinstance(self.mlp, nn.Identity):
            return self.mlp, "mlp"
        return None, None

    def test_reading(self) -> PromptReading:
        """How the exported encoder (the base's test model: the plain encoder with the training pooler, at the first
        template's [MASK] as `prompt_mask`, the unsupervised scripts' test, or denoised as `prompt_mask_denoised`, the
        supervised scripts') is read at test time (cse_kit.json): `paper`, the sentence as given, without a
        head; `official-code`, as evaluation.py with run.sh's eargs (module CHOICES). The denoising's positions are
        the training's."""
        head, kind = self._head() if self.official_test else (None, None)
        return PromptReading(self.template.text, append_period=self.official_test,
                             denoise_positions=self.denoise_positions, head=head, head_kind=kind)

    def dev_reading(self) -> tuple[str, PromptReading]:
        """(pooler, reading) of the vector that selects the checkpoint: the test vector (`paper`) or the official dev
        evaluation's (module CHOICES; it denoises even where the test vector does not)."""
        if not self.official_dev:
            return self.test_pooler, self.test_reading()
        head, kind = self._head()
        return ("prompt_mask_denoised" if self.denoise else "prompt_mask",
                PromptReading(self.template.text, fill="ids", denoise_positions=self.denoise_positions, head=head,
                              head_kind=kind))
