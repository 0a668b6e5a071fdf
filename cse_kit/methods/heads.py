"""The vocabulary heads around DiffCSE's encoder: what a masked-LM generator's vocabulary projection receives
(used by DiffCSE's and ESimCSE's generators), and the conditional MLM and COCO-LM corrective LM heads of DiffCSE's
objective ablations (Tables 3, 4 and 15), with the corrective LM's loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .contrastive import init_like_official

#: COCO-LM's weight λ_copy of the copy loss in its corrective LM (Meng et al. 2021 §3.2,
#: L_CLM = λ_copy·L_copy + L_LM; 50 is the official default: microsoft/COCO-LM
#: fairseq/fairseq/models/cocolm/model.py:644 `binary_loss_weight`)
COPY_WEIGHT = 50.0


class ConditionalLMHead(nn.Module):
    """The vocabulary head on the discriminator: the discriminator's word embeddings as the decoder (tied), with its
    own output bias. The conditional MLM puts BERT's transform (Linear, GELU, LayerNorm) before it, as BERT's MLM
    head; the corrective LM does not: COCO-LM's p_LM is softmax(x_t·h_i) over the vocabulary, and its official CLMHead
    (microsoft/COCO-LM fairseq/fairseq/models/cocolm/model.py:349-371, the transform commented out) is the tied
    embeddings plus a bias. `copy`: COCO-LM's copy head, a linear map of h_i to the logit of p_copy(1 | h_i)
    (model.py:374-397 BinaryHead, with a bias)."""

    def __init__(self, config, vocab_size: int, copy: bool = False, transform: bool = True):
        super().__init__()
        hidden = config.hidden_size
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(),
                                       nn.LayerNorm(hidden, eps=getattr(config, "layer_norm_eps", 1e-12))
                                       ) if transform else nn.Identity()
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.copy = nn.Linear(hidden, 1) if copy else None
        init_like_official(self, getattr(config, "initializer_range", 0.02))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return self.transform(hidden) @ word_embeddings[:len(self.bias)].T + self.bias


def corrective_lm_loss(vocab_logits: torch.Tensor, copy_logits: torch.Tensor, original: torch.Tensor,
                       edited: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """COCO-LM's corrective LM per token (Meng et al. 2021, §3.2), with c = 1(x''_i = x_i) (the token is the
    original), p_copy(1 | h_i) = sigmoid(w_copy·h_i + b) and p_LM the vocabulary softmax:
        p_CLM(x_i | h_i) = c · sg(p_copy(1 | h_i)) + sg(p_copy(0 | h_i)) · p_LM(x_i | h_i)    sg: stop-gradient
        L_LM,i   = -log p_CLM(x_i | h_i)                        (summed over the masked positions M only)
        L_copy,i = -[c log p_copy(1 | h_i) + (1 - c) log p_copy(0 | h_i)]       (summed over every position)
        L_CLM    = λ_copy · L_copy + L_LM
    p_copy is trained by L_copy alone: no gradient reaches the copy head through L_LM. Returns (L_LM,i, L_copy,i)
    for every row given; `DiffCSE.corrective_loss` sums each over its positions."""
    log_lm = vocab_logits.float().log_softmax(-1).gather(-1, original.unsqueeze(-1)).squeeze(-1)
    c = copy_logits.float()
    keep = F.logsigmoid(-c.detach()) + log_lm  # log(sg(p_copy(0)) p_LM)
    copied = original == edited
    log_p = torch.where(copied, torch.logaddexp(F.logsigmoid(c.detach()), keep), keep)
    copy_loss = F.binary_cross_entropy_with_logits(c, copied.float(), reduction="none")
    return -log_p, copy_loss


def generator_head_input(generator: nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """What a masked LM's output embedding (its vocabulary projection) receives, shape (batch, length, dim).
    The projection itself is skipped here: a pre-hook hands it an empty slice, so no (batch, length, vocab)
    tensor is ever built."""
    captured = {}

    def capture(module, args):
        captured["hidden"] = args[0]
        return (args[0][..., :0, :],)

    handle = generator.get_output_embeddings().register_forward_pre_hook(capture)
    try:
        generator(input_ids=ids, attention_mask=attention_mask)
    finally:
        handle.remove()
    return captured["hidden"]
