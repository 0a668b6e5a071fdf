"""DiffAug (Wang & Lu, EMNLP 2022): two learned prefixes θ1, θ2 on one encoder give the two views of a sentence.
Stage 1 tunes the prefixes (and an NLI classifier) with the encoder frozen: softmax cross-entropy on [u; v; |u - v|]
of NLI pairs, the anchor through prefix 1, the hypothesis through prefix 2 (entailment 1, contradiction 0). Stage 2
tunes everything with InfoNCE between the two prefix views (semi-supervised: Wiki1M, optionally + α · the stage-1
loss on NLI batches; supervised: NLI entailment positives and contradiction hard negatives).

The sentence vector is PromptBERT's [MASK] state (cse_kit.eval.prompt), template-denoised in stage 2 and passed through a
training-only MLP, as the official scripts (`--apply_template_delta_train --mlp_train`). The two prefixes are the two
halves of one table of 2l positions, chosen per row by the attention mask (diffaug/models.py:194-229); at test time
every row attends all 2l, without dropout, denoising or MLP (models.py:374-399, evaluation.py:63-94).

The loop (cse_kit.train.loop) runs the stages (`two_stages`, cse_kit.methods.Objective): it sets `stage`, steps
`stage1_parameters()` with their own optimizer in stage 1 and everything in stage 2, and feeds NLI rows as
`nli_input_ids` / `nli_attention_mask`.

Table 3's variants (§4.4, Appendix F) are settings. `prefix_mode`: "different" (DiffAug), "same" (every row attends
the whole table of 2l positions: one prefix for both views, the same 0.3% of parameters, and training attends what
the test model attends), "fix" (stage 2 leaves the prefixes as stage 1 made them), "tuning" (the encoder frozen in
both stages: prefix-tuning). `augmentation_module` "adapter" or "lora" (rank `module_rank`) replaces the prefixes by
two sets of Houlsby adapters or of LoRA, one per view (cse_kit.models.adapters), and tests with their average."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..eval.prompt import PROMPTBERT_BERT, Template, mask_states, sentence_lengths
from ..models.adapters import (AdaptedEncoder, HoulsbyAdapters, add_lora_views, lora_view, lora_weights,
                            merged_lora_average)
from ..models.prefix import PrefixedEncoder, PrefixEncoder, encode_with_prefix, prefix_half_mask
from .contrastive import MLPProjector, init_like_official, official_share
from .objective import Objective, check_choice, variant_choices
from .registry import register
from .semi import nli_cross_entropy

#: choice -> its values. denoise_offset: which empty-template row is subtracted from a sentence of n sub-words:
#: row n ("sentence", PromptBERT's rule, the paper) or row n + l ("sentence+prefix": the official blen counts the
#: l prefix columns the attention mask holds, models.py:229, 279-282). stage1_clip: the gradients whose norm stage 1
#: clips to max_grad_norm: the prefixes' and classifier's ("trained", the paper's frozen PLM) or every parameter's,
#: the encoder's unused gradients included ("all": clip_grad_norm_(model.parameters()), trainers.py:615-618).
CHOICES = {"denoise_offset": ("sentence", "sentence+prefix"), "stage1_clip": ("trained", "all")}
VARIANTS = {"paper": {"denoise_offset": "sentence", "stage1_clip": "trained"},
            "official-code": {"denoise_offset": "sentence+prefix", "stage1_clip": "all"}}
SETTINGS = ("semi", "sup")
#: Table 3: the module that makes the two views, and how the prefixes train (see the module docstring)
MODULES = ("prefix", "adapter", "lora")
PREFIX_MODES = ("different", "same", "fix", "tuning")


@register("diffaug")
class DiffAug(Objective):
    """Batches: stage 2 `input_ids` / `attention_mask` (batch, views, length) of templated ids, 2 views (the sentence
    twice: semi-supervised) or 3 (anchor, entailment, contradiction: supervised); `nli_*` (batch, 3, length) NLI
    triplets for stage 1 and the auxiliary loss. DiffAug's own: two stages (the first trains the prefixes and the
    classifier), the two prefix views, and the test model that attends both prefixes."""

    two_stages = True

    @dataclass
    class Options:
        """DiffAug's settings (defaults: the paper; variant=official-code gives the official code's choices). Its
        stages' shared settings are the run's: stage1_steps, stage1_lr, aux_weight, nli_data, nli_batch_size..."""

        prefix_len: int = 8  # l: positions of each of the two prefixes (the official --prefix_len is 2l)
        denoise: bool = True  # template denoising in stage 2 (official --apply_template_delta_train)
        variant: str = "paper"  # paper | official-code: the defaults of the two choices below
        denoise_offset: str | None = None  # sentence (paper) | sentence+prefix (official code)
        stage1_clip: str | None = None  # trained (paper) | all (official code)
        # Table 3: the module making the two views, prefix | adapter | lora (two sets, one per view), the adapters' /
        # LoRA's rank r, and the prefix variants different (DiffAug) | same | fix | tuning
        augmentation_module: str = "prefix"
        module_rank: int = 4
        prefix_mode: str = "different"

        def __post_init__(self):
            if self.prefix_len < 1 or self.module_rank < 1:
                raise ValueError(f"prefix_len and module_rank must be >= 1, got {self.prefix_len} and "
                                 f"{self.module_rank}")
            check_choice("variant", self.variant, VARIANTS)
            for name, choices in {**CHOICES, "augmentation_module": MODULES, "prefix_mode": PREFIX_MODES}.items():
                check_choice(name, getattr(self, name), choices)
            if self.prefix_mode != "different" and self.augmentation_module != "prefix":
                raise ValueError(f"prefix_mode {self.prefix_mode} is a prefix variant (Table 3): set "
                                 "augmentation_module=prefix")

    former_names = {"diffaug_variant": "variant"}

    @classmethod
    def check_run(cls, cfg) -> None:
        if not (cfg.template and cfg.pooler == "prompt_mask"):
            raise ValueError("DiffAug reads the [MASK] of a prompt template: set pooler=prompt_mask and a template")
        if (cfg.stage1_steps or cfg.aux_weight) and not cfg.nli_data:
            raise ValueError("DiffAug's stage 1 and auxiliary loss train on NLI triplets: set nli_data (NLI, or "
                             "SNLI-triplets offline)")

    def __init__(self, encoder: nn.Module, tokenizer, *, prefix_len: int = 8, temp: float = 0.05,
                 aux_weight: float = 0.0, denoise: bool = True, mlp: bool = True, template: str = PROMPTBERT_BERT,
                 denoise_offset: str = "sentence", stage1_clip: str = "trained", augmentation_module: str = "prefix",
                 module_rank: int = 4, prefix_mode: str = "different", official_processes: int = 1):
        for name, value, choices in (("denoise_offset", denoise_offset, CHOICES["denoise_offset"]),
                                     ("stage1_clip", stage1_clip, CHOICES["stage1_clip"]),
                                     ("augmentation_module", augmentation_module, MODULES),
                                     ("prefix_mode", prefix_mode, PREFIX_MODES)):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        if prefix_len < 1 or module_rank < 1:
            raise ValueError(f"prefix_len and module_rank must be >= 1, got {prefix_len} and {module_rank}")
        if prefix_mode != "different" and augmentation_module != "prefix":
            raise ValueError(f"prefix_mode {prefix_mode!r} is a prefix variant: use augmentation_module=prefix")
        config = encoder.config
        # read at the template's [MASK] in training and test, through its own MLP (below), not a training projector
        super().__init__(encoder, pooler="prompt_mask", projector=None, temp=temp, tokenizer=tokenizer)
        self.template = Template(tokenizer, template)
        self.prefix_len, self.aux_weight = prefix_len, aux_weight
        self.denoise, self.denoise_offset, self.stage1_clip = denoise, denoise_offset, stage1_clip
        self.augmentation_module, self.prefix_mode = augmentation_module, prefix_mode
        init_std = getattr(config, "initializer_range", 0.02)
        if augmentation_module == "prefix":
            # initialised as the official cl_init leaves every part (init_weights(), models.py:145: BERT's
            # _init_weights, N(0, initializer_range) weights and embeddings, zero biases)
            self.prefix_encoder = init_like_official(
                PrefixEncoder(2 * prefix_len, config.hidden_size, config.num_hidden_layers), init_std)
            nn.init.normal_(self.prefix_encoder.embedding.weight, std=init_std)
            # the official code applies the encoder's hidden dropout to the produced key/values (models.py:62, 421)
            self.prefix_dropout = nn.Dropout(config.hidden_dropout_prob)
        elif augmentation_module == "adapter":
            self.adapters = HoulsbyAdapters(encoder, module_rank)
        else:
            self.encoder = add_lora_views(encoder, module_rank)
        if prefix_mode == "tuning":  # the loop's optimizers then leave the encoder alone in both stages
            self.encoder.requires_grad_(False)
        self.mlp = init_like_official(MLPProjector(config.hidden_size), init_std) if mlp else nn.Identity()
        self.classifier = init_like_official(nn.Linear(3 * config.hidden_size, 2), init_std)
        self.official_processes = official_processes  # the official run's process count (official_share)

    @classmethod
    def from_config(cls, cfg, tokenizer, encoder) -> "DiffAug":
        options = cls.options_of(cfg)
        return cls(encoder, tokenizer, prefix_len=options.prefix_len, temp=cfg.temp, aux_weight=cfg.aux_weight,
                   denoise=options.denoise, mlp=cfg.projector == "mlp", template=cfg.template,
                   augmentation_module=options.augmentation_module, module_rank=options.module_rank,
                   prefix_mode=options.prefix_mode, official_processes=cfg.official_processes,
                   **variant_choices(options, VARIANTS))

    # --- the parts of each stage -------------------------------------------------------------------------------

    def module_weights(self) -> dict[str, nn.Parameter]:
        """The augmentation module's parameters by name: the prefix encoder's, both adapter sets' or both LoRA
        adapters'."""
        if self.augmentation_module == "prefix":
            return {f"prefix_encoder.{k}": v for k, v in self.prefix_encoder.named_parameters()}
        if self.augmentation_module == "adapter":
            return {f"adapters.{k}": v for k, v in self.adapters.named_parameters()}
        return {f"encoder.{k}": v for k, v in lora_weights(self.encoder).items()}

    def stage1_parameters(self) -> list[nn.Parameter]:
        """What stage 1 trains (the official optimizer2, trainers.py:262-276): the prefixes (or adapters, LoRA) and
        the classifier."""
        return [*self.module_weights().values(), *self.classifier.parameters()]

    def added_parameter_share(self) -> float:
        """Table 3's "# added params (rel. BERT-base)": the module's parameters over the encoder's own. A prefix
        counts as its table (2l positions x layers x key/value x hidden), what every layer attends at test time: its
        re-parametrisation MLP is a training device dropped after training (Li & Liang 2021, §4.3), 14.8M
        parameters for BERT-base."""
        added = self.module_weights().values()
        module = {id(p) for p in added}
        encoder = sum(p.numel() for p in self.encoder.parameters() if id(p) not in module)
        if self.augmentation_module == "prefix":
            return self.prefix_encoder.positions * self.prefix_encoder.projection[-1].out_features / encoder
        return sum(p.numel() for p in added) / encoder

    def stage1_state(self) -> dict[str, torch.Tensor]:
        """What stage 1 produced, saved at the stage boundary: the prefix table (2l, layers * 2 * hidden), without
        dropout (or the adapters' or LoRA's weights), and the classifier (DiffAug's Figure 3 measures the prefixes
        against the frozen encoder)."""
        if self.augmentation_module == "prefix":
            with torch.no_grad():
                module = {"prefix": self.prefix_encoder()}
        else:
            module = self.module_weights()
        return {**{k: v.detach().float().cpu().contiguous() for k, v in module.items()},
                **{f"classifier.{k}": v.detach().float().cpu().contiguous()
                   for k, v in self.classifier.state_dict().items()}}

    def clipped_parameters(self) -> list[nn.Parameter]:
        """Whose gradient norm is clipped in the current stage."""
        if self.stage == 1 and self.stage1_clip == "trained":
            return self.stage1_parameters()
        return list(self.parameters())

    # --- encoding ----------------------------------------------------------------------------------------------

    def _table(self, rows: int) -> torch.Tensor:
        """(rows, 2l, layers * 2 * hidden): the prefix table, dropped out independently per row (the official code
        expands the table to the batch before its dropout, models.py:52-62)."""
        table = self.prefix_encoder()
        if self.prefix_mode == "fix" and self.stage == 2:  # no gradient: AdamW skips them, weight decay included
            table = table.detach()
        return self.prefix_dropout(table.unsqueeze(0).expand(rows, -1, -1))

    def _hidden(self, ids: torch.Tensor, mask: torch.Tensor, modules: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """(rows, length, hidden): the last hidden states, row i through view modules[i]'s module (0: θ1 or view 1's
        adapters / LoRA, 1: θ2 or view 2's). Prefixes: one pass, each row attending its half of the table (all of
        it for "same"). Adapters and LoRA: one pass per module (peft's per-row adapter_names is inference-only)."""
        if self.augmentation_module == "prefix":
            attended = torch.ones(len(ids), 2 * self.prefix_len, dtype=torch.long, device=ids.device) \
                if self.prefix_mode == "same" else prefix_half_mask(modules, self.prefix_len)
            return encode_with_prefix(self.encoder, ids, mask, self._table(len(ids)), attended,
                                      positions).last_hidden_state
        parts, order = [], []
        for k in (0, 1):
            rows = (modules == k).nonzero().squeeze(1)
            if len(rows):
                view = self.adapters.use(k) if self.augmentation_module == "adapter" else lora_view(self.encoder, k)
                with view:
                    parts.append(self.encoder(input_ids=ids[rows], attention_mask=mask[rows], return_dict=True,
                                              position_ids=None if positions is None else positions[rows])
                                 .last_hidden_state)
                order.append(rows)
        return torch.cat(parts)[torch.cat(order).argsort()]

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(rows, views, hidden): the [MASK] state of each view through its module (view 0 through θ1, views 1 and
        2 through θ2; no denoising, no MLP)."""
        rows, views, _ = input_ids.shape
        ids, mask = input_ids.flatten(0, 1), attention_mask.flatten(0, 1)
        modules = (torch.arange(views, device=ids.device) > 0).long().repeat(rows)
        hidden = self._hidden(ids, mask, modules)
        return mask_states(hidden, ids, self.template.mask_token_id).view(rows, views, -1)

    def template_deltas(self, shifts: torch.Tensor, prefixes: torch.Tensor) -> torch.Tensor:
        """(len(shifts), hidden): the [MASK] state of the empty template through prefix prefixes[i] (0: θ1, 1: θ2)
        alone, its positions after the sentence slot moved by shifts[i]; positions start after the whole table, as
        the real tokens' do (models.py:96-129, with dropout and gradient, as there). All rows in one encoder pass,
        each attending its half of the table, as the views do: one pass, not one per prefix."""
        table = 2 * self.prefix_len if self.augmentation_module == "prefix" else 0
        ids, positions = self.template.denoising_inputs(shifts, offset=table)
        return mask_states(self._hidden(ids, torch.ones_like(ids), prefixes, positions), ids,
                           self.template.mask_token_id)

    def denoised(self, pooled: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Stage 2's template denoising: each view minus its prefix's empty-template state for its length. One row
        per (prefix, length) present, so the entailment and contradiction views share their prefix-2 rows, as the
        official delta2 (models.py:281-284)."""
        shifts = sentence_lengths(attention_mask, self.template)
        if self.denoise_offset == "sentence+prefix" and self.augmentation_module == "prefix":
            # the prefix columns a row's attention mask holds: its half of the table, or all of it ("same")
            shifts = shifts + self.prefix_len * (2 if self.prefix_mode == "same" else 1)
        prefixes = torch.ones_like(shifts)
        prefixes[:, 0] = 0  # view 0 through θ1, the others through θ2
        span = int(shifts.max()) + 1
        needed, index = torch.unique(prefixes * span + shifts, return_inverse=True)
        return pooled - self.template_deltas(needed % span, needed // span)[index]

    # --- losses ------------------------------------------------------------------------------------------------

    def stage1_loss(self, batch: dict) -> torch.Tensor:
        """The classifier's cross-entropy on the NLI triplets' views through the MLP (models.py:314-325)."""
        views = self.encode(batch["nli_input_ids"], batch["nli_attention_mask"])
        return nli_cross_entropy(self.classifier, self.mlp(views))

    def contrastive_loss(self, batch: dict) -> torch.Tensor:
        return self.views_loss(self.encode(batch["input_ids"], batch["attention_mask"]), batch["attention_mask"])

    def vectors(self, pooled: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Stage 2's training vectors of the views' [MASK] states: denoised and through the MLP."""
        return self.mlp(self.denoised(pooled, attention_mask) if self.denoise else pooled)

    def embed(self, batch: dict) -> torch.Tensor:
        """(rows, views, hidden): stage 2's training vector of each view (view 0 through θ1, the others through θ2)."""
        return self.vectors(self.encode(batch["input_ids"], batch["attention_mask"]), batch["attention_mask"])

    def views_loss(self, pooled: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """InfoNCE of the views' [MASK] states, denoised and through the MLP."""
        z = self.vectors(pooled, attention_mask)
        return self.info_nce(z[:, 0], z[:, 1], z[:, 2] if z.shape[1] == 3 else None)

    @staticmethod
    def check_views(batch: dict) -> None:
        views = batch["input_ids"].shape[1]
        if views not in (2, 3):
            raise ValueError(f"DiffAug's stage 2 needs 2 views (semi-supervised) or 3 (anchor, entailment, "
                             f"contradiction: supervised); got {views}")

    def stage2_outputs(self, contrastive: torch.Tensor, aux: torch.Tensor | None) -> dict:
        out = {"contrastive": contrastive.detach()}
        # the auxiliary cross-entropy is each process's own mean there, which DDP's average leaves whole
        loss = official_share(contrastive, self.official_processes)
        if aux is not None:
            loss = loss + self.aux_weight * aux
            out["nli"] = aux.detach()
        return {"loss": loss, **out}

    def forward(self, batch: dict) -> dict:
        if self.stage == 1:
            loss = self.stage1_loss(batch)
            return {"loss": loss, "nli": loss.detach()}
        self.check_views(batch)
        contrastive = self.contrastive_loss(batch)
        return self.stage2_outputs(contrastive, self.stage1_loss(batch) if self.aux_weight else None)

    # --- gradient caching of stage 2 (cse_kit.methods.grad_cache): the views' [MASK] states and the auxiliary
    # loss's NLI triplets chunk by chunk; the denoising (one pass of the empty template per prefix and length), the
    # MLP, InfoNCE and the classifier on the whole batch ---

    def cache_inputs(self, batch: dict) -> dict:
        self.check_views(batch)
        inputs = {"main": {k: batch[k] for k in ("input_ids", "attention_mask")}}
        if self.aux_weight:
            inputs["nli"] = {"input_ids": batch["nli_input_ids"], "attention_mask": batch["nli_attention_mask"]}
        return inputs

    def cache_encode(self, stream: str, inputs: dict) -> torch.Tensor:
        return self.encode(inputs["input_ids"], inputs["attention_mask"])

    def cache_loss(self, inputs: dict, reps: dict, backward, chunk: int) -> tuple[torch.Tensor, dict]:
        contrastive = self.views_loss(reps["main"], inputs["main"]["attention_mask"])
        aux = nli_cross_entropy(self.classifier, self.mlp(reps["nli"])) if self.aux_weight else None
        out = self.stage2_outputs(contrastive, aux)
        return out["loss"], out

    # --- the model that is evaluated and exported --------------------------------------------------------------

    def test_model(self) -> tuple[nn.Module, str]:
        """The encoder attending the whole prefix table (both prefixes, no dropout), pooled at [MASK] without
        denoising or MLP: the paper's "both prefix modules are prepended" and evaluation.py agree. Adapters and LoRA
        (the paper does not say): the average of the two views' modules, LoRA merged into a plain encoder."""
        if self.augmentation_module == "adapter":
            return AdaptedEncoder(self.encoder, self.adapters), self.test_pooler
        if self.augmentation_module == "lora":
            return merged_lora_average(self.encoder), self.test_pooler
        with torch.no_grad():
            table = self.prefix_encoder()
        return PrefixedEncoder(self.encoder, table), self.test_pooler
