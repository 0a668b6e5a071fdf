"""ConSERT's objective in the kit (cse_kit/methods/consert.py) against an independent float64 restatement of the
official code (yym6472/ConSERT@03c9e8f), on identical weights and identical random draws.

Restated here, without calling the kit's computation:
  * transformers/modeling_bert.py, the repository's copy of transformers 3.4. BertEmbeddings.forward :183-205
    (RobertaEmbeddings.forward of modeling_roberta.py:95-125, whose positions count from padding_idx + 1 over the
    non-pad ids). BertModel.forward with the augmentation patch :831-842: _replace_position_ids :921-943 (shuffle of
    arange(512), also for RoBERTa: modeling_roberta.py:765-787), _sample_span :945-969, _replace_embedding_output
    :886-919 and _cutoff_embeddings :971-1003 (row, column, random). BERT's layers are written out by hand.
  * sentence_transformers/models/Pooling.py:49-77: the mean over features['attention_mask'], the unchanged mask.
  * sentence_transformers/losses/AdvCLSoftmaxLoss.py:
      - _reps_to_output :358-376; _contrastive_loss_forward :378-424 (nt_xent, hidden_norm); _data_aug :429-452;
      - forward :454-801. This covers the final-views path with --no_pair --cl_loss_only (:707-721, :786-794), the
        baseline path (:469-483), the cutoff path (:582-608), the adversarial path of --add_cl with the default
        "adv" strategy (:491-543, :764-765) and the loss (:723-801), with LOSS_RATE_SCHEDULERS[0] = (1, 1).

The kit's random choices (permutations, cut indices, span starts) are read off its views. They are handed to the
restatement as the index lists the official Python would have drawn (random.shuffle, np.random.randint). The
restatement checks their counts and ranges against the official formulas. Dropout cannot differ: the models are in
eval().

The kit's NLI triplets are mapped to the official pairs as its docstring says: (anchor, entailment) labelled 1 and
(anchor, contradiction) labelled 0. The official loss_a + loss_b runs on the anchors and on the hypotheses. The
official code encodes sentence_feature_a and sentence_feature_b in separate calls; BERT treats rows independently, so
here all of a batch's sentences go through one call."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cse_kit.methods.consert import ConSERT
from cse_kit.models import build_smoke_model

from conftest import rerandomize

TIGHT = 1e-10
LARGE_NUM = 1e9  # AdvCLSoftmaxLoss.py:8
SENTENCES = ["A man is playing a guitar.", "The cat sleeps.",
             "Two dogs run through the deep snow, chasing a small red ball across the frozen field!",
             'She said "no" twice.', "Rain.", "Kids play soccer in a park on a sunny afternoon."]
NLI = [("A woman is slicing an onion.", "Someone cuts a vegetable.", "The woman is asleep in bed."),
       ("Kids play soccer in a park on a sunny afternoon.", "Children are outside.", "The kids are in a classroom."),
       ("A dog barks.", "An animal makes noise.", "A cat sleeps quietly on the warm windowsill all day long."),
       ("Rain.", "It is wet outside today.", "The sun is shining on the dry field.")]


def _model(name):
    tokenizer, encoder = build_smoke_model(name, num_hidden_layers=3)
    encoder = encoder.double().eval()
    rerandomize(encoder, 1, 0.25)
    return tokenizer, encoder


@pytest.fixture(scope="module")
def bert():
    return _model("smoke-bert")


@pytest.fixture(scope="module")
def roberta():
    return _model("smoke-roberta")


# --------------------------------------------------------------------------------------------------------------
# the repository's transformers 3.4 with its augmentation patch, and the sentence_transformers model around it
# --------------------------------------------------------------------------------------------------------------

def _layer_norm(x, ln):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _linear(x, lin):
    return x @ lin.weight.T + lin.bias


def _gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def embeddings(model, input_ids, position_ids=None):
    """BertEmbeddings.forward (modeling_bert.py:183-205) or RobertaEmbeddings.forward (modeling_roberta.py:95-125;
    create_position_ids_from_input_ids when no positions are given); dropout is the identity in eval(). The word
    embeddings (and RoBERTa's position embeddings) are nn.Embedding(padding_idx=pad_token_id)
    (modeling_bert.py:171, modeling_roberta.py:77, 91-93): the pad row gets no gradient."""
    e = model.embeddings
    pad = model.config.pad_token_id
    roberta = model.config.model_type == "roberta"
    if position_ids is None:
        if roberta:
            not_pad = input_ids.ne(pad).long()
            position_ids = torch.cumsum(not_pad, 1) * not_pad + pad
        else:
            position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    x = (F.embedding(input_ids, e.word_embeddings.weight, padding_idx=pad)
         + F.embedding(position_ids, e.position_embeddings.weight, padding_idx=pad if roberta else None)
         + e.token_type_embeddings.weight[torch.zeros_like(input_ids)])
    return _layer_norm(x, e.LayerNorm)


def layers(model, x, attention_mask):
    """BertEncoder with BertModel's extended mask (1 - mask) * -10000 (modeling_bert.py:811, 844-853)."""
    config = model.config
    assert config.hidden_act == "gelu"
    B, L, H = x.shape
    nh = config.num_attention_heads
    hd = H // nh
    bias = (1.0 - attention_mask[:, None, None, :].double()) * -10000.0

    def heads(t):
        return t.view(B, L, nh, hd).permute(0, 2, 1, 3)

    for layer in model.encoder.layer:
        a = layer.attention.self
        q, k, v = heads(_linear(x, a.query)), heads(_linear(x, a.key)), heads(_linear(x, a.value))
        ctx = (torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, -1) @ v).permute(0, 2, 1, 3)
        h = _layer_norm(_linear(ctx.reshape(B, L, H), layer.attention.output.dense) + x,
                        layer.attention.output.LayerNorm)
        x = _layer_norm(_linear(_gelu(_linear(h, layer.intermediate.dense)), layer.output.dense) + h,
                        layer.output.LayerNorm)
    return x


def patched_bert(model, input_ids, attention_mask, flags):
    """BertModel.forward with the augmentation patch (modeling_bert.py:831-842); `flags` are what set_flag left.
    Returns the last layer and the embedding output recorded at :841."""
    B, L = input_ids.shape
    position_ids = None
    if "data_aug_shuffle" in flags:  # :921-943
        position_ids = torch.arange(512).expand((B, -1))[:, :L]
        shuffled = []
        for i in range(B):
            n = int(attention_mask[i].sum())
            indexes = flags["data_aug_shuffle"][i]  # random.shuffle(list(range(num_tokens)))
            assert sorted(indexes) == list(range(n))
            total = indexes + list(range(n, L))
            shuffled.append(torch.index_select(position_ids[i], 0, torch.tensor(total)).unsqueeze(0))
        position_ids = torch.cat(shuffled, 0)
    if "data_aug_span" in flags:  # :945-969
        rate, starts = flags["data_aug_span"]
        keep_out = []
        for true_len, start_id in zip(attention_mask.sum(1).tolist(), starts):
            sample_len = max(int(true_len * (1 - rate)), 1)
            assert 0 <= start_id <= true_len - sample_len  # np.random.randint(0, high=true_len-sample_len+1)
            tmp = [1] * L
            for idx in range(start_id, start_id + sample_len):
                tmp[idx] = 0
            keep_out.append(tmp)
        keep_out = torch.tensor(keep_out).bool()
        input_ids = input_ids.masked_fill(keep_out, value=0)
        attention_mask = attention_mask.masked_fill(keep_out, value=0)
    embedding_output = embeddings(model, input_ids, position_ids)
    recorded = embedding_output
    if "data_aug_adv" in flags:  # :888-893
        embedding_output = flags["noise_embedding"]
    elif "data_aug_cutoff" in flags:  # :894-903, _cutoff_embeddings :971-1003
        direction, rate, chosen = flags["data_aug_cutoff"]
        H = embedding_output.shape[-1]
        cut = []
        for i in range(B):
            sample_embedding = embedding_output[i]
            n = int(attention_mask[i].sum())
            num_dimensions, dim_index = {"row": (n, 0), "column": (H, 1), "random": (n * H, 0)}[direction]
            cutoff_indexes = chosen[i]  # random.shuffle(list(range(num_dimensions)))[:int(num_dimensions * rate)]
            assert len(cutoff_indexes) == int(num_dimensions * rate) and len(set(cutoff_indexes)) == len(cutoff_indexes)
            assert all(0 <= j < num_dimensions for j in cutoff_indexes)
            if direction == "random":
                sample_embedding = sample_embedding.reshape(-1)
            cutoff_embedding = torch.index_fill(sample_embedding, dim_index,
                                                torch.tensor(cutoff_indexes, dtype=torch.long), 0.0)
            if direction == "random":
                cutoff_embedding = cutoff_embedding.reshape(L, H)
            cut.append(cutoff_embedding.unsqueeze(0))
        embedding_output = torch.cat(cut, 0)
    return layers(model, embedding_output, attention_mask), recorded


def sentence_embedding(model, features, flags):
    """SentenceTransformer([Transformer, Pooling(mean)]) (main.py:189-197): Pooling.py:64-77 averages over
    features['attention_mask'], which the patch never changes."""
    last, recorded = patched_bert(model, features["input_ids"], features["attention_mask"], flags)
    mask = features["attention_mask"].unsqueeze(-1).expand(last.size()).double()
    return (last * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9), recorded


def data_aug_flags(name, rate, draws):
    """_data_aug (AdvCLSoftmaxLoss.py:429-452): the flags each augmentation sets."""
    return {"none": {}, "shuffle": {"data_aug_shuffle": draws},
            "token_cutoff": {"data_aug_cutoff": ("row", rate, draws)},
            "feature_cutoff": {"data_aug_cutoff": ("column", rate, draws)},
            "dropout": {"data_aug_cutoff": ("random", rate, draws)},
            "span": {"data_aug_span": (rate, draws)}}[name]


# --------------------------------------------------------------------------------------------------------------
# AdvCLSoftmaxLoss
# --------------------------------------------------------------------------------------------------------------

def contrastive_loss_forward(hidden1, hidden2, temperature):
    """_contrastive_loss_forward, nt_xent with hidden_norm (AdvCLSoftmaxLoss.py:404-424)."""
    batch_size = hidden1.shape[0]
    hidden1 = F.normalize(hidden1, p=2, dim=-1)
    hidden2 = F.normalize(hidden2, p=2, dim=-1)
    labels = torch.arange(0, batch_size)
    masks = F.one_hot(torch.arange(0, batch_size), num_classes=batch_size).double()
    logits_aa = hidden1 @ hidden1.T / temperature - masks * LARGE_NUM
    logits_bb = hidden2 @ hidden2.T / temperature - masks * LARGE_NUM
    logits_ab = hidden1 @ hidden2.T / temperature
    logits_ba = hidden2 @ hidden1.T / temperature
    loss_a = F.cross_entropy(torch.cat([logits_ab, logits_aa], dim=1), labels)
    loss_b = F.cross_entropy(torch.cat([logits_ba, logits_bb], dim=1), labels)
    return loss_a + loss_b


def reps_to_output(classifier, rep_a, rep_b, max_square):
    """_reps_to_output (AdvCLSoftmaxLoss.py:358-376) with concatenation_sent_rep and _difference."""
    vectors_concat = [rep_a, rep_b, torch.abs(rep_a - rep_b)]
    if max_square:
        vectors_concat.append(torch.max(rep_a, rep_b).pow(2))
    return _linear(torch.cat(vectors_concat, 1), classifier)


def pair_loss(classifier, reps, rows, max_square):
    """nn.CrossEntropyLoss on the pairs of the triplets: (anchor, entailment) -> 1, (anchor, contradiction) -> 0
    (label2int, main.py:201)."""
    z = reps.view(rows, 3, -1)
    rep_a = torch.cat([z[:, 0], z[:, 0]])
    rep_b = torch.cat([z[:, 1], z[:, 2]])
    labels = torch.tensor([1] * rows + [0] * rows)
    return F.cross_entropy(reps_to_output(classifier, rep_a, rep_b, max_square), labels)


def two_sides(view1, view2, rows, temperature):
    """contrastive_loss_a + contrastive_loss_b (:786-793): the anchors' side and the hypotheses' side."""
    a1, a2 = view1.view(rows, 3, -1), view2.view(rows, 3, -1)
    return (contrastive_loss_forward(a1[:, 0], a2[:, 0], temperature)
            + contrastive_loss_forward(a1[:, 1:].reshape(2 * rows, -1), a2[:, 1:].reshape(2 * rows, -1), temperature))


# --------------------------------------------------------------------------------------------------------------
# the kit's draws, as the official Python would have drawn them
# --------------------------------------------------------------------------------------------------------------

def kit_draws(kit, kind, rate, ids, mask):
    """Draw the kit's view from the current torch RNG state, as its forward does, and return what the official
    random.shuffle / np.random.randint would have produced for it."""
    if kind == "none":
        return None
    view = kit.draw_view(kind, rate, ids, mask)
    n = mask.sum(1).tolist()
    if kind == "shuffle":  # the kit's ids are arange(L) permuted (shuffle_positions=from_zero)
        return [view.position_ids[i, :k].tolist() for i, k in enumerate(n)]
    if kind == "span":
        return [int(torch.nonzero(view.attention_mask[i])[0]) for i in range(len(ids))]
    cut = {"token_cutoff": lambda c: c[:, 0], "feature_cutoff": lambda c: c[0],
           "dropout": lambda c: c.reshape(-1)}[kind]
    return [torch.nonzero(cut(view.cut[i])).flatten().tolist() for i in range(len(ids))]


def _unsup_batch(tokenizer, sentences=SENTENCES):
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    return ids, mask, {"input_ids": torch.stack([ids, ids], 1), "attention_mask": torch.stack([mask, mask], 1)}


def _nli_batch(tokenizer):
    batch = tokenizer([s for triplet in NLI for s in triplet], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    return ids, mask, {"input_ids": ids.view(len(NLI), 3, -1), "attention_mask": mask.view(len(NLI), 3, -1)}


def _grads(loss, kit):
    params = [p for p in kit.parameters()]
    return torch.autograd.grad(loss, params, allow_unused=True)


def _assert_same_grads(kit_loss, official_loss, kit):
    for got, expected in zip(_grads(kit_loss, kit), _grads(official_loss, kit)):
        assert (got is None) == (expected is None)
        if got is not None:
            torch.testing.assert_close(got, expected, rtol=TIGHT, atol=TIGHT)


def _kit(encoder, **options):
    return ConSERT(encoder, **options).double().eval()


# --------------------------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------------------------

UNSUP_VIEWS = [
    (("feature_cutoff", 0.2), ("shuffle", 0.0)),  # unsup-consert-base.sh:1
    (("token_cutoff", 0.3), ("shuffle", 0.0)),
    (("dropout", 0.2), ("feature_cutoff", 0.1)),
    (("span", 0.3), ("none", 0.0)),
    (("none", 0.0), ("token_cutoff", 0.15)),
]


@pytest.mark.parametrize("views", UNSUP_VIEWS, ids=lambda v: f"{v[0][0]}+{v[1][0]}")
@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_unsupervised_loss_and_gradients_equal_the_official_final_views_path(views, backbone, bert, roberta):
    """main.py:259 with --no_pair --cl_loss_only --da_final_1/2 --cutoff_rate_final_1/2 --temperature 0.1
    --cl_rate 0.15: final_loss = cl_rate · (contrastive_loss_a + 0) (AdvCLSoftmaxLoss.py:714-721, 786-794)."""
    tokenizer, encoder = bert if backbone == "bert" else roberta
    ids, mask, batch = _unsup_batch(tokenizer)
    kit = _kit(encoder, augmentations=views, temp=0.1, cl_rate=0.15)  # the official-code variant
    torch.manual_seed(3)
    out = kit(batch)
    torch.manual_seed(3)
    draws = [kit_draws(kit, kind, rate, ids, mask) for kind, rate in views]
    features = {"input_ids": ids, "attention_mask": mask}
    rep_a_view1, rep_a_view2 = (sentence_embedding(encoder, features, data_aug_flags(kind, rate, d))[0]
                                for (kind, rate), d in zip(views, draws))
    contrastive_loss_a = contrastive_loss_forward(rep_a_view1, rep_a_view2, 0.1)
    contrastive_loss_b = torch.tensor(0.0)
    final_loss = 0.15 * (contrastive_loss_a + contrastive_loss_b) * 1.0
    torch.testing.assert_close(out["loss"], final_loss, rtol=TIGHT, atol=TIGHT)
    torch.testing.assert_close(out["contrastive"], contrastive_loss_a.detach(), rtol=TIGHT, atol=TIGHT)
    _assert_same_grads(out["loss"], final_loss, kit)


def test_the_paper_variant_averages_the_2n_losses_without_cl_rate(bert):
    """The paper's unsupervised loss is the mean of the 2N in-batch losses: the official final_loss / (2 · cl_rate)
    on the same draws."""
    tokenizer, encoder = bert
    ids, mask, batch = _unsup_batch(tokenizer)
    views = (("feature_cutoff", 0.2), ("shuffle", 0.0))
    official = _kit(encoder, augmentations=views, temp=0.1, cl_rate=0.15)
    paper = _kit(encoder, augmentations=views, temp=0.1, cl_rate=0.15, cl_reduction="mean", unsup_scale="plain")
    torch.manual_seed(5)
    expected = official(batch)["loss"] / (2 * 0.15)
    torch.manual_seed(5)
    torch.testing.assert_close(paper(batch)["loss"], expected, rtol=TIGHT, atol=TIGHT)


@pytest.mark.parametrize("max_square", [True, False], ids=["official-features", "paper-features"])
def test_sbert_loss_equals_the_official_baseline_path(bert, max_square):
    """sup-sbert-base.sh:1 (--concatenation_sent_max_square): the cross-entropy of _reps_to_output on the plain
    sentence embeddings (AdvCLSoftmaxLoss.py:469-481). Without the flag, [u; v; |u - v|] (the paper's)."""
    tokenizer, encoder = bert
    ids, mask, batch = _nli_batch(tokenizer)
    kit = _kit(encoder, supervision="sbert", nli_features="sbert+max_square" if max_square else "sbert")
    rerandomize(kit.classifier, 7, 0.3)
    out = kit(batch)
    reps = sentence_embedding(encoder, {"input_ids": ids, "attention_mask": mask}, {})[0]
    loss = pair_loss(kit.classifier, reps, len(NLI), max_square)
    torch.testing.assert_close(out["loss"], loss, rtol=TIGHT, atol=TIGHT)
    _assert_same_grads(out["loss"], loss, kit)


def test_joint_loss_equals_the_official_cutoff_path(bert):
    """sup-consert-joint-base.sh:1: --add_cl --cl_rate 0.15 --temperature 0.1 --data_augmentation_strategy cutoff
    --cutoff_direction row --cutoff_rate 0.1 --concatenation_sent_max_square. rep = the plain pass, rep_cutoff the
    token cutoff (:582-608). final_loss = CE(rep_a, rep_b) + 0.15 · (loss_a + loss_b) (:744-749, 775-777, 786-794)."""
    tokenizer, encoder = bert
    ids, mask, batch = _nli_batch(tokenizer)
    kit = _kit(encoder, supervision="joint", augmentations=(("none", 0.0), ("token_cutoff", 0.1)), temp=0.1)
    rerandomize(kit.classifier, 7, 0.3)
    torch.manual_seed(11)
    out = kit(batch)
    torch.manual_seed(11)
    draws = kit_draws(kit, "token_cutoff", 0.1, ids, mask)
    features = {"input_ids": ids, "attention_mask": mask}
    rep = sentence_embedding(encoder, features, {})[0]
    rep_cutoff = sentence_embedding(encoder, features, data_aug_flags("token_cutoff", 0.1, draws))[0]
    loss_n_n = pair_loss(kit.classifier, rep, len(NLI), True)
    final_loss = loss_n_n * 1.0 + 0.15 * two_sides(rep, rep_cutoff, len(NLI), 0.1) * 1.0
    torch.testing.assert_close(out["loss"], final_loss, rtol=TIGHT, atol=TIGHT)
    torch.testing.assert_close(out["softmax"], loss_n_n.detach(), rtol=TIGHT, atol=TIGHT)
    _assert_same_grads(out["loss"], final_loss, kit)


def test_joint_loss_with_the_adversarial_view_equals_the_official_adversarial_path(bert):
    """main.py:259 (--add_cl with the default --data_augmentation_strategy adv; noise_norm not passed, so
    AdvCLSoftmaxLoss's default 0.01, here 0.5 to move the result). :491-543 is the normal forward, normal_loss.backward
    to the embedding outputs, the parameters' gradients zeroed, noise = noise_norm · g / (|g| + 1e-10) and a forward
    with the embedding output replaced. :744-749 is the cross-entropy, :764-765 and 786-794 the contrastive loss
    between the plain and the adversarial view."""
    tokenizer, encoder = bert
    ids, mask, batch = _nli_batch(tokenizer)
    kit = _kit(encoder, supervision="joint", augmentations=(("none", 0.0), ("adversarial", 0.0)), temp=0.1,
               noise_norm=0.5)
    rerandomize(kit.classifier, 7, 0.3)
    out = kit(batch)
    features = {"input_ids": ids, "attention_mask": mask}
    rep, embedding_output = sentence_embedding(encoder, features, {})
    normal_loss = pair_loss(kit.classifier, rep, len(NLI), True)
    embedding_output.retain_grad()
    normal_loss.backward(retain_graph=True)
    unnormalized_noise = embedding_output.grad.detach_()
    for p in kit.parameters():
        if p.grad is not None:
            p.grad.detach_()
            p.grad.zero_()
    norm = unnormalized_noise.norm(p=2, dim=-1)
    noise = 0.5 * (unnormalized_noise / (norm.unsqueeze(dim=-1) + 1e-10))
    adv_rep = sentence_embedding(encoder, features, {"data_aug_adv": True,
                                                     "noise_embedding": embedding_output + noise})[0]
    final_loss = pair_loss(kit.classifier, rep, len(NLI), True) + 0.15 * two_sides(rep, adv_rep, len(NLI), 0.1)
    torch.testing.assert_close(out["loss"], final_loss, rtol=TIGHT, atol=TIGHT)
    _assert_same_grads(out["loss"], final_loss, kit)
