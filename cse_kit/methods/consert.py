"""ConSERT (Yan et al., ACL 2021): two views of each sentence that differ by an augmentation at the embedding layer
(token shuffle, token or feature cutoff, dropout, a span, or an adversarial perturbation), pulled together by
SimCLR's NT-Xent loss (the other view's vector is the positive; every other vector of both views is a negative) on
the mean of the last layer's token states. There is no projector: the exported model is the plain encoder. It is
evaluated with `avg_top2`, the mean of the last two layers, which is what the official README reports
(yym6472/ConSERT README.md:72; eval.py:28-31).

How the augmentations get in without a patched transformers: the official code patches BertModel.forward
(transformers/modeling_bert.py:831-842 of its copy of transformers 3.4). The patch changes the position ids
(shuffle), the ids and the attention mask (span), and the embedding module's output (cutoffs, dropout, adversarial)
before the first layer. Here shuffle and span go through the model's public arguments (`position_ids`,
`input_ids`, `attention_mask`). The embedding-output edits go through a forward hook on `encoder.embeddings` that is
registered for that view's pass only. The hook sees the tensor the patch edits, after the embeddings' LayerNorm and
dropout. `inputs_embeds` could not do this: it enters before the position embeddings and the LayerNorm.

Supervision (`supervision`, from the official scripts sup-sbert-base.sh and sup-consert-joint-base.sh):
- `sbert`: SBERT's softmax classifier over NLI labels, on [u; v; |u - v|]. The scripts append max(u, v)²
  (`nli_features`).
- `joint`: that cross-entropy + cl_rate · the contrastive loss. A view without augmentation is the un-augmented
  pass the cross-entropy reads, as the scripts' first view (AdvCLSoftmaxLoss.py:590-601, 775-777).

The kit's NLI data are triplets (anchor, entailment, contradiction) and have no neutral class. Each triplet gives
two pairs: (anchor, entailment) labelled entailment and (anchor, contradiction) labelled contradiction. The
classifier keeps the official three outputs (contradiction 0, entailment 1, neutral 2; main.py:201), so neutral is
never a target. The contrastive term of `joint` runs on each side of the pairs, like the official loss_a + loss_b:
once on the anchors, and once on the hypotheses (entailments and contradictions together).

ConSERT's two-run strategies (sup-unsup and joint-unsup, which use --continue_training) are two kit runs: the second
sets `model=` to the first run's exported model."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .contrastive import gather_with_grad
from ..data.registry import is_nli
from ..eval.encode import POOLERS, PROMPT_POOLERS, check_pooler, pooled_output
from .objective import Objective, check_choice, variant_choices
from .registry import register

#: augmentation -> what it does to one view (official transformers/modeling_bert.py of yym6472/ConSERT)
AUGMENTATIONS = {
    "none": "the sentence as it is",
    "shuffle": "the real tokens' position ids permuted, [CLS] and [SEP] included; ids and mask unchanged (:921-943)",
    "token_cutoff": "int(n·rate) of the n real tokens' embedding rows zeroed, [CLS] and [SEP] included (:977-997)",
    "feature_cutoff": "int(d·rate) of the d embedding columns zeroed at every position (:980-997)",
    "dropout": "elements of the real tokens' embeddings zeroed at the rate, not rescaled (:983-999; `dropout_aug`)",
    "span": "a contiguous span of max(int(n·(1-rate)), 1) real tokens kept. The others get id 0 and are masked from "
            "attention, but the mean pooling still averages over them (:945-969; the sentence_transformers Pooling "
            "reads the unchanged mask, Pooling.py:52, 64-77)",
    "adversarial": "the embedding output + noise_norm · g / (|g| + 1e-10) per token, where g is the NLI "
                   "cross-entropy's gradient on the un-augmented pass (AdvCLSoftmaxLoss.py:491-543); joint only",
}
#: the augmentations that take a rate in (0, 1) (modeling_bert.py:898; AdvCLSoftmaxLoss.py:300, 304)
RATED = ("token_cutoff", "feature_cutoff", "dropout", "span")
SUPERVISION = ("none", "sbert", "joint")
#: main.py:201
LABELS = {"contradiction": 0, "entailment": 1, "neutral": 2}

#: Where the paper and the official code (yym6472/ConSERT@03c9e8f) differ; each choice -> its values.
CHOICES = {
    # The paper's loss is the average of the 2N in-batch classification losses. The code adds the two directions'
    # means instead (AdvCLSoftmaxLoss.py:421-423), which is twice the paper's value.
    "cl_reduction": ("mean", "sum"),
    # Unsupervised, the paper's objective is the contrastive loss alone. With --cl_loss_only the code still
    # multiplies it by --cl_rate (AdvCLSoftmaxLoss.py:794), which is 0.15 in unsup-consert-base.sh:1.
    "unsup_scale": ("plain", "scaled"),
    # The paper's classifier reads SBERT's [u; v; |u - v|]. Every supervised script passes
    # --concatenation_sent_max_square (sup-sbert-base.sh:1, sup-consert-joint-base.sh:1), which appends max(u, v)²
    # (AdvCLSoftmaxLoss.py:353-354, 370-371).
    "nli_features": ("sbert", "sbert+max_square"),
    # The paper drops each element of the token embeddings with the rate as its probability. The code zeroes exactly
    # int(n·d·rate) of the n real tokens' n·d elements, drawn without replacement (modeling_bert.py:983-999).
    "dropout_aug": ("bernoulli", "exact"),
    # The paper shuffles the position ids. The code permutes arange(length) for every model: it is built without
    # the model's own ids (modeling_bert.py:926-927, modeling_roberta.py:770-771). For BERT this is the same thing.
    # RoBERTa's own positions start at padding_idx + 1, so the code shifts its shuffled view by -(padding_idx + 1).
    "shuffle_positions": ("model", "from_zero"),
    # The paper reports every test sentence whole (the kit's protocol, as SentEval). The code's eval.py:27 reloads the
    # saved SentenceTransformer, whose sentence_bert_config.json keeps the training --max_seq_length 64
    # (main.py:199; Transformer.py:24, 98-104, 106-120): a sentence is cut at min(longest, 64) + 3 tokens, [CLS] and [SEP]
    # included (Transformer.py:88-93), i.e. at the run's max_seq_length (67) here, and the exported model says so.
    "test_truncation": ("none", "max_seq_length"),
    # The paper does not say which vector selects the checkpoint; the kit's protocol scores the test vector. The
    # code's dev evaluator (main.py:278, 291) encodes with the model being trained, the mean of the last layer
    # (main.py:189-192), cut as above.
    "dev_pooler": ("test", "training"),
}
VARIANTS = {
    "paper": {"cl_reduction": "mean", "unsup_scale": "plain", "nli_features": "sbert", "dropout_aug": "bernoulli",
              "shuffle_positions": "model", "test_truncation": "none", "dev_pooler": "test"},
    "official-code": {"cl_reduction": "sum", "unsup_scale": "scaled", "nli_features": "sbert+max_square",
                      "dropout_aug": "exact", "shuffle_positions": "from_zero", "test_truncation": "max_seq_length",
                      "dev_pooler": "training"},
}


@dataclass
class View:
    """The encoder inputs of one augmented view: what the official patch changes (modeling_bert.py:831-842)."""
    input_ids: torch.Tensor
    attention_mask: torch.Tensor  # what the encoder attends (span: the kept span only)
    pool_mask: torch.Tensor  # what the mean pooling averages: the sentence's own mask (Pooling.py:52)
    position_ids: torch.Tensor | None = None  # None: the model's own
    cut: torch.Tensor | None = None  # True where the embedding output is zeroed; broadcasts to (rows, length, d)
    embeddings: torch.Tensor | None = None  # replaces the embedding output (adversarial)


def random_order(valid: torch.Tensor) -> torch.Tensor:
    """Per row, the valid positions in a uniformly random order, then the others in their own order: the official
    `random.shuffle(range(n)) + range(n, length)` (modeling_bert.py:934-939) for every row at once."""
    keys = torch.rand(valid.shape, device=valid.device, dtype=torch.float64)  # float64: ties would bias the order
    keys = torch.where(valid, keys, 1 + torch.arange(valid.shape[-1], device=valid.device, dtype=keys.dtype))
    return keys.argsort(-1)


def pick(valid: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """True at k[i] of row i's valid positions, drawn uniformly without replacement (`indexes[:k]` after the
    official shuffle, modeling_bert.py:991-994)."""
    ranks = random_order(valid).argsort(-1)
    return ranks < k.view(-1, *[1] * (valid.dim() - 1))


def widened(logits: torch.Tensor) -> torch.Tensor:
    """Logits for a cross-entropy in float32 at least: autocast's bf16/fp16 widened, float64 kept."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def count(n: torch.Tensor, rate: float) -> torch.Tensor:
    """int(n * rate) as the official Python computes it, in float64 (a float32 product can round across an integer)."""
    return torch.floor(n.double() * rate).long()


@register("consert")
class ConSERT(Objective):
    """Batches: `input_ids` / `attention_mask` (rows, views, length). Unsupervised: 2 views of a corpus sentence
    (the same ids; the augmentations make the views). Supervised: 3 views (anchor, entailment, contradiction).
    ConSERT's own: the augmented views, NT-Xent, no projector, and a test (and dev) pooler other than the training
    one."""

    @dataclass
    class Options:
        """ConSERT's settings (defaults: the official unsup-consert-base.sh). It also reads the run's temp, pooler (its
        training vector: avg, the mean of the last layer) and dropout (0.0 is the script's --no_dropout)."""

        supervision: str = "none"  # none (contrastive only) | sbert (NLI cross-entropy only) | joint (both)
        aug1: str = "feature_cutoff"  # view 1's augmentation (--da_final_1): AUGMENTATIONS
        rate1: float = 0.2  # its rate (--cutoff_rate_final_1); 0 for none, shuffle and adversarial
        aug2: str = "shuffle"  # view 2's augmentation (--da_final_2)
        rate2: float = 0.0  # its rate (--cutoff_rate_final_2)
        cl_rate: float = 0.15  # weight of the contrastive loss (--cl_rate)
        noise_norm: float = 0.01  # the adversarial view's perturbation norm per token (what main.py:259 leaves)
        test_pooler: str = "avg_top2"  # the evaluated and exported vector (README.md:72: last two layers' mean)
        variant: str = "official-code"  # official-code | paper: the defaults of the seven choices below
        cl_reduction: str | None = None  # mean (paper: the 2N losses averaged) | sum (code: two directions added)
        unsup_scale: str | None = None  # plain (paper) | scaled (code: cl_rate multiplies the unsupervised loss)
        nli_features: str | None = None  # sbert (paper: [u; v; |u - v|]) | sbert+max_square (code: + max(u, v)²)
        dropout_aug: str | None = None  # bernoulli (paper) | exact (code: exactly int(n·d·rate) elements zeroed)
        shuffle_positions: str | None = None  # model (paper) | from_zero (code: permutes arange; moves RoBERTa's)
        test_truncation: str | None = None  # none (paper) | max_seq_length (code: eval.py cuts test sentences)
        dev_pooler: str | None = None  # test (paper: the test vector selects) | training (code: the last layer's mean)

        def __post_init__(self):
            check_choice("supervision", self.supervision, SUPERVISION)
            for view in (1, 2):
                kind, rate = getattr(self, f"aug{view}"), getattr(self, f"rate{view}")
                check_choice(f"aug{view}", kind, AUGMENTATIONS)
                if (kind in RATED) != (0 < rate < 1):
                    raise ValueError(f"aug{view} {kind} takes " + (f"a rate in (0, 1): set rate{view}" if kind in RATED
                                     else f"no rate: set rate{view}=0") + f" (got {rate})")
                if kind == "adversarial" and self.supervision != "joint":
                    raise ValueError("ConSERT's adversarial view follows the NLI cross-entropy's gradient: set "
                                     "supervision=joint")
            if self.cl_rate < 0 or self.noise_norm <= 0:
                raise ValueError("cl_rate must be >= 0 and noise_norm > 0")
            check_choice("test_pooler", self.test_pooler, [p for p in POOLERS if p not in PROMPT_POOLERS])
            check_choice("variant", self.variant, VARIANTS)
            for name, choices in CHOICES.items():
                check_choice(name, getattr(self, name), choices)

    former_names = {f"consert_{name}": name for name in Options.__dataclass_fields__}

    @classmethod
    def check_run(cls, cfg) -> None:
        if cfg.projector != "none":
            raise ValueError("ConSERT has no projector (official main.py:189-197): set projector=none")
        supervision = cfg.method_options["supervision"]
        if (supervision == "none") == is_nli(cfg.data):
            raise ValueError("ConSERT trains on a corpus with consert.supervision=none and on NLI triplets with sbert "
                             f"or joint; got consert.supervision={supervision} on {cfg.data}")

    def __init__(self, encoder: nn.Module, *, augmentations=(("feature_cutoff", 0.2), ("shuffle", 0.0)),
                 supervision: str = "none", temp: float = 0.1, cl_rate: float = 0.15, noise_norm: float = 0.01,
                 pooler: str = "avg", test_pooler: str = "avg_top2", cl_reduction: str = "sum",
                 unsup_scale: str = "scaled", nli_features: str = "sbert+max_square", dropout_aug: str = "exact",
                 shuffle_positions: str = "from_zero", test_max_length: int | None = None,
                 dev_pooler: str | None = None):
        super().__init__(encoder, pooler=pooler, projector=None, temp=temp)
        for name, value in (("cl_reduction", cl_reduction), ("unsup_scale", unsup_scale),
                            ("nli_features", nli_features), ("dropout_aug", dropout_aug),
                            ("shuffle_positions", shuffle_positions)):
            if value not in CHOICES[name]:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(CHOICES[name])}")
        if supervision not in SUPERVISION:
            raise ValueError(f"unknown supervision {supervision!r}; choose one of: {', '.join(SUPERVISION)}")
        for kind, rate in augmentations:
            if kind not in AUGMENTATIONS:
                raise ValueError(f"unknown augmentation {kind!r}; choose one of: {', '.join(AUGMENTATIONS)}")
            if (kind in RATED) != (0 < rate < 1):
                raise ValueError(f"augmentation {kind} takes " + ("a rate in (0, 1)" if kind in RATED else "no rate")
                                 + f", got {rate}")
            if kind == "adversarial" and supervision != "joint":
                raise ValueError("the adversarial view follows the NLI cross-entropy's gradient: it needs "
                                 "supervision='joint'")
        if not hasattr(encoder, "embeddings"):
            raise ValueError(f"{type(encoder).__name__} has no `embeddings` module, where ConSERT's augmentations act")
        self.augmentations = tuple((kind, float(rate)) for kind, rate in augmentations)
        self.supervision, self.cl_rate, self.noise_norm = supervision, cl_rate, noise_norm
        # the evaluated vector, the vector that selects the checkpoint, and the length test sentences are cut at
        self._test_pooler, self._dev_pooler = check_pooler(test_pooler), check_pooler(dev_pooler or test_pooler)
        self.test_max_length = test_max_length
        self.cl_reduction, self.unsup_scale, self.nli_features = cl_reduction, unsup_scale, nli_features
        self.dropout_aug, self.shuffle_positions = dropout_aug, shuffle_positions
        if supervision != "none":  # torch's default init: the official classifier lives in the loss module, which
            # BERT's init_weights never touches (AdvCLSoftmaxLoss.py:356)
            width = 4 if nli_features == "sbert+max_square" else 3  # u, v, |u - v| (, max(u, v)²): :346-356
            self.classifier = nn.Linear(width * encoder.config.hidden_size, len(LABELS))

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "ConSERT":
        options = cls.options_of(cfg)
        augmentations = ((options.aug1, options.rate1), (options.aug2, options.rate2))
        choices = variant_choices(options, VARIANTS)
        truncation, dev = choices.pop("test_truncation"), choices.pop("dev_pooler")
        return cls(encoder, augmentations=augmentations, supervision=options.supervision, temp=cfg.temp,
                   cl_rate=options.cl_rate, noise_norm=options.noise_norm, pooler=cfg.pooler,
                   test_pooler=options.test_pooler, **choices,
                   test_max_length=cfg.max_seq_length if truncation == "max_seq_length" else None,
                   dev_pooler=cfg.pooler if dev == "training" else None)

    @property
    def test_pooler(self) -> str:
        return self._test_pooler

    @property
    def dev_pooler(self) -> str:
        return self._dev_pooler

    # --- views -------------------------------------------------------------------------------------------------

    def _model_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The position ids the encoder uses by itself: RoBERTa's count from padding_idx + 1, else 0, 1, ..."""
        embeddings = self.encoder.embeddings
        if hasattr(embeddings, "create_position_ids_from_input_ids"):
            return embeddings.create_position_ids_from_input_ids(input_ids, embeddings.padding_idx)
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)

    def draw_view(self, kind: str, rate: float, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> View:
        """One view of (rows, length) sentences, its random choices drawn from the global torch RNG (checkpoints
        keep its state). Adversarial views are made in `forward`, from the cross-entropy."""
        real = attention_mask.bool()
        n = attention_mask.sum(1)
        out = View(input_ids, attention_mask, attention_mask)
        if kind == "shuffle":
            base = (self._model_positions(input_ids) if self.shuffle_positions == "model" else
                    torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids))
            out.position_ids = base.gather(1, random_order(real))
        elif kind == "token_cutoff":
            out.cut = pick(real, count(n, rate)).unsqueeze(-1)
        elif kind == "feature_cutoff":
            columns = torch.ones(len(n), self.encoder.config.hidden_size, dtype=torch.bool, device=n.device)
            out.cut = pick(columns, count(columns.sum(1), rate)).unsqueeze(1)
        elif kind == "dropout":
            elements = real.unsqueeze(-1).expand(-1, -1, self.encoder.config.hidden_size)
            if self.dropout_aug == "bernoulli":
                out.cut = elements & (torch.rand(elements.shape, device=elements.device) < rate)
            else:
                out.cut = pick(elements.flatten(1), count(n * elements.shape[-1], rate)).view(elements.shape)
        elif kind == "span":
            kept = torch.clamp(count(n, 1 - rate), min=1)
            start = torch.floor(torch.rand(len(n), device=n.device, dtype=torch.float64) * (n - kept + 1)).long()
            at = torch.arange(input_ids.shape[1], device=n.device)
            inside = (at >= start[:, None]) & (at < (start + kept)[:, None])
            out.input_ids = input_ids.masked_fill(~inside, 0)  # masked_fill(mask, value=0) (:966-967)
            out.attention_mask = attention_mask * inside
        elif kind != "none":
            raise ValueError(f"augmentation {kind!r} is not drawn here")
        return out

    def encode(self, view: View, keep_embeddings: list | None = None) -> torch.Tensor:
        """(rows, hidden): the training pooler's vectors of one view. `keep_embeddings` receives the embedding
        output (with its graph), for the adversarial view."""
        def edit(module, args, output):
            if keep_embeddings is not None:
                keep_embeddings.append(output)
            if view.embeddings is not None:
                return view.embeddings
            return output if view.cut is None else output.masked_fill(view.cut, 0.0)

        edits = view.cut is not None or view.embeddings is not None or keep_embeddings is not None
        hook = self.encoder.embeddings.register_forward_hook(edit) if edits else None
        try:
            return pooled_output(self.encoder, self.pooler, view.pool_mask, input_ids=view.input_ids,
                                 attention_mask=view.attention_mask, position_ids=view.position_ids)
        finally:
            if hook is not None:
                hook.remove()

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): each view's training vector without augmentation, the encoder in its current mode
        (what the semi-supervised strategies' NLI head reads, cse_kit.methods.semi)."""
        input_ids = batch["input_ids"]
        ids, mask = input_ids.flatten(0, 1), batch["attention_mask"].flatten(0, 1)
        return self.encode(View(ids, mask, mask)).view(*input_ids.shape[:2], -1)

    # --- losses ------------------------------------------------------------------------------------------------

    def nt_xent(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """NT-Xent of AdvCLSoftmaxLoss._contrastive_loss_forward (:404-424). Row i of each view has the other
        view's row i as its positive, and every other row of both views as a negative. The two directions' mean
        cross-entropies are summed (`sum`, the code) or averaged (`mean`, the paper's average of 2N). The rows
        are gathered from every process."""
        h1 = F.normalize(gather_with_grad(z1), dim=-1)
        h2 = F.normalize(gather_with_grad(z2), dim=-1)
        self_pair = torch.eye(len(h1), dtype=torch.bool, device=h1.device)
        labels = torch.arange(len(h1), device=h1.device)
        losses = [F.cross_entropy(widened(torch.cat([a @ b.T, (a @ a.T).masked_fill(self_pair, float("-inf"))], 1))
                                  / self.temp, labels) for a, b in ((h1, h2), (h2, h1))]
        total = losses[0] + losses[1]
        return total if self.cl_reduction == "sum" else total / 2

    def features(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """_reps_to_output's classifier input (AdvCLSoftmaxLoss.py:358-373)."""
        parts = [u, v, (u - v).abs()]
        if self.nli_features == "sbert+max_square":
            parts.append(torch.maximum(u, v).pow(2))
        return torch.cat(parts, 1)

    def nli_loss(self, z: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the classifier on the pairs of (rows, 3, hidden) triplets: (anchor, entailment) ->
        entailment, (anchor, contradiction) -> contradiction."""
        anchor, entailment, contradiction = z.unbind(1)
        logits = self.classifier(torch.cat([self.features(anchor, entailment), self.features(anchor, contradiction)]))
        labels = torch.tensor([LABELS["entailment"], LABELS["contradiction"]], device=z.device)
        return F.cross_entropy(widened(logits), labels.repeat_interleave(len(z)))

    def adversarial_view(self, plain: View, embeddings: torch.Tensor, loss: torch.Tensor) -> View:
        """The embedding output moved by noise_norm along the loss's normalised gradient, per token
        (AdvCLSoftmaxLoss.py:512-536). The noise carries no graph; the embedding output keeps its graph."""
        (grad,) = torch.autograd.grad(loss, embeddings, retain_graph=True)
        noise = grad / (grad.norm(dim=-1, keepdim=True) + 1e-10)
        return View(plain.input_ids, plain.attention_mask, plain.pool_mask,
                    embeddings=embeddings + self.noise_norm * noise)

    def sentences(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask) of the sentences the views are made of: the corpus sentence (unsupervised: both columns hold
        it) or every sentence of the triplets, flattened."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        views = ids.shape[1]
        if views != (2 if self.supervision == "none" else 3):
            raise ValueError(f"ConSERT with supervision {self.supervision!r} needs "
                             + ("2 views of a corpus sentence" if self.supervision == "none" else
                                "NLI triplets (anchor, entailment, contradiction)") + f"; got {views} views")
        if self.supervision == "none":
            return ids[:, 0], mask[:, 0]
        return ids.flatten(0, 1), mask.flatten(0, 1)

    def contrastive_terms(self, z: list[torch.Tensor], rows: int) -> torch.Tensor:
        """NT-Xent of the two views: of the sentences, or the official loss_a + loss_b of the triplets (the
        anchors' side and the hypotheses' side)."""
        if self.supervision == "none":
            return self.nt_xent(*z)
        z1, z2 = (v.view(rows, 3, -1) for v in z)
        return self.nt_xent(z1[:, 0], z2[:, 0]) + self.nt_xent(z1[:, 1:].flatten(0, 1), z2[:, 1:].flatten(0, 1))

    def forward(self, batch: dict) -> dict:
        ids, mask = self.sentences(batch)
        rows = batch["input_ids"].shape[0]
        out = {}
        if self.supervision != "none":
            plain = View(ids, mask, mask)
            kept = [] if any(kind == "adversarial" for kind, _ in self.augmentations) else None
            z_plain = self.encode(plain, kept)
            loss = self.nli_loss(z_plain.view(rows, 3, -1))
            out["softmax"] = loss.detach()
            if self.supervision == "sbert":
                return {"loss": loss, **out}
        z = []
        for kind, rate in self.augmentations:
            if kind == "none" and self.supervision != "none":  # the un-augmented pass the cross-entropy read
                z.append(z_plain)
            elif kind == "adversarial":
                z.append(self.encode(self.adversarial_view(plain, kept[0], loss)))
            else:
                z.append(self.encode(self.draw_view(kind, rate, ids, mask)))
        contrastive = self.contrastive_terms(z, rows)
        loss = self.total_loss(contrastive, loss if self.supervision != "none" else None)
        return {"loss": loss, "contrastive": contrastive.detach(), **out}

    def total_loss(self, contrastive: torch.Tensor, softmax: torch.Tensor | None) -> torch.Tensor:
        if softmax is None:
            return contrastive * (self.cl_rate if self.unsup_scale == "scaled" else 1.0)
        return softmax + self.cl_rate * contrastive

    # --- gradient caching (cse_kit.methods.grad_cache): every view's augmentation drawn for the whole batch, the
    # views encoded chunk by chunk (the sentences of the triplets flattened), NT-Xent and the classifier on the
    # whole batch ---

    def cache_refusal(self) -> str | None:
        if any(kind == "adversarial" for kind, _ in self.augmentations):
            return ("ConSERT's adversarial view follows the whole batch's cross-entropy gradient on the embeddings, "
                    "which a chunk does not have")
        return None

    def cache_inputs(self, batch: dict) -> dict:
        ids, mask = self.sentences(batch)
        views = [] if self.supervision == "none" else [View(ids, mask, mask)]  # the plain pass the classifier reads
        if self.supervision != "sbert":
            views += [None if kind == "none" and views else self.draw_view(kind, rate, ids, mask)
                      for kind, rate in self.augmentations]
        return {"main": views}

    def cache_encode(self, stream: str, inputs: list) -> torch.Tensor:
        """(rows, views, hidden); a view without augmentation under supervision is the plain pass itself."""
        z = []
        for view in inputs:
            z.append(z[0] if view is None else self.encode(view))
        return torch.stack(z, 1)

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        z = reps["main"]
        out, softmax = {}, None
        if self.supervision != "none":
            softmax = self.nli_loss(z[:, 0].view(-1, 3, z.shape[-1]))
            out["softmax"] = softmax.detach()
            if self.supervision == "sbert":
                return softmax, {"loss": softmax, **out}
            z = z[:, 1:]
        contrastive = self.contrastive_terms(list(z.unbind(1)), len(z) // (1 if self.supervision == "none" else 3))
        loss = self.total_loss(contrastive, softmax)
        return loss, {"loss": loss, "contrastive": contrastive.detach(), **out}
