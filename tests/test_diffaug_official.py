"""DiffAug's objective in the kit (cse_kit/methods/diffaug.py, cse_kit/models/prefix.py, cse_kit/eval/prompt.py) against an
independent float64 restatement of the official code (TianduoWang/DiffAug@e6292b6), on identical weights.

Restated here, without calling the kit:
  * diffaug/models.py:20-48 PrefixEncoder (prefix_projection), :51-63 get_prompt, :70-79 MLPLayer, :96-129 get_delta,
    :148-337 cl_forward (stage "1" and "2": the prefix attention masks of :194-229 with their reshape order, [MASK]
    pooling :249-250, template denoising :269-284, MLP :286-289, InfoNCE :327-336, the [u; v; |u-v|] classifier
    :314-325 and :338-349 for the auxiliary loss), :359-405 sentemb_forward;
  * utils.py:38-41 TEMPLATES["00"], :64-86 get_encoded_bs_and_es; train.py:609-617 (the sentence's sub-words cut
    to max_seq_length, wrapped in enc_bs / enc_es, right-padded); evaluation.py:44-50 and :79-94 (the batcher:
    the template filled with text, tokenized whole, sent_emb=True);
  * transformers 4.15's BertModel with legacy tuple past_key_values (not installable here): keys/values of the
    prefix concatenated before each layer's own, the real tokens' positions shifted by the past length unless
    position_ids are given, the additive mask (1 - mask) * -10000 over P + L columns; BERT's layer by hand.

Dropout cannot differ: the model is in eval(). The kit computes its cross-entropies on float32 logits (autocast
style, as the official --fp16 run), so the losses agree to float32 precision; the sentence vectors fed to them, and
the gradients of a float64 loss through the kit's graph, agree to ~1e-10."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cse_kit.eval.encode import Encoder
from cse_kit.methods.diffaug import DiffAug
from cse_kit.models import build_smoke_model
from cse_kit.models.prefix import PrefixedEncoder, encode_with_prefix
from cse_kit.eval.prompt import Template

from conftest import rerandomize

TIGHT = 1e-10
L_PREFIX = 2  # the kit's prefix_len l; the official --prefix_len is 2l
MAX_SEQ_LENGTH = 12  # train.py's data_args.max_seq_length, small so that the long sentence is cut
TEMP = 0.05

SENTENCES = ["A man is playing a guitar.", "The cat sleeps.",
             "Two dogs run through the deep snow, chasing a small red ball across the frozen field!",
             'She said "no" twice.', "Rain."]
NLI = [("A woman is slicing an onion.", "Someone cuts a vegetable.", "The woman is asleep in bed."),
       ("Kids play soccer in a park on a sunny afternoon.", "Children are outside.", "The kids are in a classroom."),
       ("A dog barks.", "An animal makes noise.", "A cat sleeps quietly on the warm windowsill all day long.")]


# --------------------------------------------------------------------------------------------------------------
# the model, on identical weights
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup():
    tokenizer, encoder = build_smoke_model("smoke-bert", num_hidden_layers=3)
    encoder = encoder.double().eval()
    rerandomize(encoder, 1, 0.25)
    torch.manual_seed(0)
    kit = DiffAug(encoder, tokenizer, prefix_len=L_PREFIX, temp=TEMP, aux_weight=0.0, denoise=True, mlp=True,
                  denoise_offset="sentence+prefix").double().eval()
    for i, part in enumerate((kit.prefix_encoder, kit.mlp, kit.classifier)):
        rerandomize(part, 10 + i, 0.4)
    return tokenizer, encoder, kit


# --------------------------------------------------------------------------------------------------------------
# transformers 4.15 BertModel, by hand
# --------------------------------------------------------------------------------------------------------------

def _layer_norm(x, ln):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _linear(x, lin):
    return x @ lin.weight.T + lin.bias


def _gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def bert_415(bert, input_ids, attention_mask=None, past_key_values=None, position_ids=None, all_layers=False):
    """BertModel.forward of transformers 4.15: last_hidden_state (or every layer's output)."""
    config = bert.config
    assert config.hidden_act == "gelu" and getattr(config, "position_embedding_type", "absolute") == "absolute"
    B, L = input_ids.shape
    H, nh = config.hidden_size, config.num_attention_heads
    hd = H // nh
    P = 0 if past_key_values is None else past_key_values[0][0].shape[2]
    if attention_mask is None:
        attention_mask = torch.ones(B, L + P, dtype=torch.float64)
    assert attention_mask.shape == (B, P + L)
    bias = (1.0 - attention_mask[:, None, None, :].to(torch.float64)) * -10000.0
    if position_ids is None:
        position_ids = torch.arange(P, P + L).unsqueeze(0).expand(B, L)
    e = bert.embeddings
    x = (e.word_embeddings.weight[input_ids] + e.token_type_embeddings.weight[torch.zeros_like(input_ids)]
         + e.position_embeddings.weight[position_ids])
    x = _layer_norm(x, e.LayerNorm)
    outs = [x]

    def heads(t):
        return t.view(B, -1, nh, hd).permute(0, 2, 1, 3)

    for i, layer in enumerate(bert.encoder.layer):
        a = layer.attention.self
        q, k, v = heads(_linear(x, a.query)), heads(_linear(x, a.key)), heads(_linear(x, a.value))
        if past_key_values is not None:
            past = past_key_values[i][:2]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + bias
        ctx = (torch.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, L, H)
        h = _layer_norm(_linear(ctx, layer.attention.output.dense) + x, layer.attention.output.LayerNorm)
        x = _layer_norm(_linear(_gelu(_linear(h, layer.intermediate.dense)), layer.output.dense) + h,
                        layer.output.LayerNorm)
        outs.append(x)
    return outs if all_layers else x


# --------------------------------------------------------------------------------------------------------------
# the official DiffAug code (models.py, utils.py, train.py, evaluation.py)
# --------------------------------------------------------------------------------------------------------------

TEMPLATE_00 = '*cls*_This_sentence_of_"*sent0*"_means*mask*.*sep+*'


def get_encoded_bs_and_es(template, tokenizer):
    """utils.py:64-86 (BERT: no strip of the leading blank): ([CLS] + enc_bs, enc_es + [SEP], enc_template)."""
    templt = template.replace('*mask*', tokenizer.mask_token).replace('*sep+*', '').replace('*cls*', '') \
        .replace('*sent0*', ' ').split(" ")
    bs = templt[0].replace('_', ' ')
    es = templt[1].replace('_', ' ')
    enc_bs = tokenizer.encode(bs, add_special_tokens=False)
    enc_es = tokenizer.encode(es, add_special_tokens=False)
    enc_template = tokenizer.encode(bs + es)
    return [tokenizer.cls_token_id] + enc_bs, enc_es + [tokenizer.sep_token_id], enc_template


def official_features(tokenizer, columns):
    """train.py:609-630: columns = [sent0s, sent1s(, sent2s)] -> input_ids, attention_mask (total, views, ml)."""
    enc_bs, enc_es, _ = get_encoded_bs_and_es(TEMPLATE_00, tokenizer)
    sentences = [s for col in columns for s in col]
    ids = [enc_bs + tokenizer.encode(s, add_special_tokens=False)[:MAX_SEQ_LENGTH] + enc_es for s in sentences]
    ml = max(len(i) for i in ids)
    mask = [len(i) * [1] + (ml - len(i)) * [0] for i in ids]
    ids = [i + [tokenizer.pad_token_id] * (ml - len(i)) for i in ids]
    total = len(columns[0])
    pick = lambda rows: torch.tensor([[rows[i + v * total] for v in range(len(columns))] for i in range(total)])
    return pick(ids), pick(mask)


class Official:
    """BertForCL's attributes (models.py:408-426) around the kit's weights: prefix_len is the official 2l."""

    def __init__(self, kit, tokenizer):
        self.kit, self.bert = kit, kit.encoder
        config = self.bert.config
        self.prefix_len = 2 * kit.prefix_len
        self.n_layer, self.n_head = config.num_hidden_layers, config.num_attention_heads
        self.n_embd = config.hidden_size // config.num_attention_heads
        self.mask_token_id = tokenizer.mask_token_id
        self.bs, self.es, self.enc_template = get_encoded_bs_and_es(TEMPLATE_00, tokenizer)
        self.temp = TEMP

    # models.py:20-48 (PrefixEncoder.embedding / trans1 = the kit's prefix_encoder.embedding / projection)
    def prefix_encoder(self, prefix):
        pe = self.kit.prefix_encoder
        return _linear(torch.tanh(_linear(pe.embedding.weight[prefix], pe.projection[0])), pe.projection[2])

    # models.py:67-80 (MLPLayer.dense = the kit's mlp[0])
    def mlp(self, x):
        return torch.tanh(_linear(x, self.kit.mlp[0]))

    # models.py:51-63; cls.dropout is the identity in eval()
    def get_prompt(self, prefix_token_ids, batch_size):
        prefix_token_ids = torch.Tensor(prefix_token_ids).long()
        prefix_tokens = prefix_token_ids.unsqueeze(0).expand(batch_size, -1)
        pkv = self.prefix_encoder(prefix_tokens)
        pkv = pkv.view(batch_size, prefix_token_ids.size(0), self.n_layer * 2, self.n_head, self.n_embd)
        return pkv.permute([2, 0, 3, 1, 4]).split(2)

    # models.py:96-129
    def get_delta(self, prefix_ids):
        max_sent_len = 128
        past_key_values = self.get_prompt(prefix_ids, max_sent_len)
        d_input_ids = torch.Tensor(self.enc_template).repeat(max_sent_len, 1).long()
        template_len = d_input_ids.shape[1]
        offset_len = self.prefix_len
        d_position_ids = torch.arange(offset_len, template_len + offset_len).unsqueeze(0).repeat(max_sent_len, 1)
        d_position_ids[:, len(self.bs):] += torch.arange(max_sent_len).unsqueeze(-1)
        last_hidden = bert_415(self.bert, d_input_ids, position_ids=d_position_ids, past_key_values=past_key_values)
        delta = last_hidden[d_input_ids == self.mask_token_id]
        return delta, template_len

    def _nli(self, z1, z2, z3):
        positive_feat = torch.cat([z1, z2, torch.abs(z1 - z2)], dim=1)
        negative_feat = torch.cat([z1, z3, torch.abs(z1 - z3)], dim=1)
        combined_feat = torch.cat([positive_feat, negative_feat], dim=0)
        nli_labels = torch.cat([torch.ones(positive_feat.size(0)), torch.zeros(negative_feat.size(0))]).long()
        return torch.nn.functional.cross_entropy(_linear(combined_feat, self.kit.classifier), nli_labels)

    @staticmethod
    def _cos(x, y):
        return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))

    # models.py:148-352; blen_rule "official" is models.py:279-282 as written, "sentence" PromptBERT's/the paper's
    def cl_forward(self, input_ids=None, attention_mask=None, sup_input_ids=None, sup_attention_mask=None,
                   stage="2", use_aux_loss=False, aux_weight=0.0, apply_template_delta_train=True,
                   blen_rule="official", wrong_reshape=False):
        l = self.prefix_len // 2
        if stage == "1":
            batch_size, num_sent = sup_input_ids.size(0), sup_input_ids.size(1)
            input_ids = sup_input_ids.view(-1, sup_input_ids.size(-1))
            attention_mask = sup_attention_mask.view(-1, sup_attention_mask.size(-1))
            sup_batch_size, sup_num_sent = 0, 0
        else:
            batch_size, num_sent = input_ids.size(0), input_ids.size(1)
            input_ids = input_ids.view((-1, input_ids.size(-1)))
            attention_mask = attention_mask.view((-1, attention_mask.size(-1)))
            if use_aux_loss and sup_input_ids is not None:
                sup_batch_size, sup_num_sent = sup_input_ids.size(0), sup_input_ids.size(1)
                sup_input_ids = sup_input_ids.view(-1, sup_input_ids.size(-1))
                sup_attention_mask = sup_attention_mask.view(-1, sup_attention_mask.size(-1))
                if sup_input_ids.size(-1) != input_ids.size(-1):
                    length_diff = sup_input_ids.size(-1) - input_ids.size(-1)
                    padding = torch.zeros(batch_size * num_sent, length_diff).long()
                    input_ids = torch.cat([input_ids, padding], dim=1)
                    attention_mask = torch.cat([attention_mask, padding], dim=1)
                assert sup_input_ids.shape[-1] == input_ids.shape[-1]
                input_ids = torch.cat([input_ids, sup_input_ids], dim=0)
                attention_mask = torch.cat([attention_mask, sup_attention_mask], dim=0)
            else:
                sup_batch_size, sup_num_sent = 0, 0

        past_key_values = self.get_prompt(list(range(self.prefix_len)),
                                          batch_size * num_sent + sup_batch_size * sup_num_sent)
        pones, pzros = torch.ones(batch_size, l), torch.zeros(batch_size, l)
        cat = (lambda parts: torch.cat(parts, dim=0)) if wrong_reshape else \
            (lambda parts: torch.cat(parts, dim=1).reshape(-1, l))
        if stage == "1" or num_sent == 3:
            left, right = cat([pones, pzros, pzros]), cat([pzros, pones, pones])
        else:
            assert num_sent == 2
            left, right = cat([pones, pzros]), cat([pzros, pones])
        if stage == "2" and use_aux_loss and sup_input_ids is not None:
            sup_pones, sup_pzros = torch.ones(sup_batch_size, l), torch.zeros(sup_batch_size, l)
            left = torch.cat([left, torch.cat([sup_pones, sup_pzros, sup_pzros], dim=1).reshape(-1, l)], dim=0)
            right = torch.cat([right, torch.cat([sup_pzros, sup_pones, sup_pones], dim=1).reshape(-1, l)], dim=0)
        attention_mask = torch.cat((left, right, attention_mask), dim=1).long()

        last_hidden = bert_415(self.bert, input_ids, attention_mask=attention_mask, past_key_values=past_key_values)
        assert bool(((input_ids == self.mask_token_id).sum(1) == 1).all())
        pooler_output = last_hidden[input_ids == self.mask_token_id]
        if stage == "1":
            pooler_output = pooler_output.view((batch_size, num_sent, pooler_output.size(-1)))
            attention_mask = attention_mask.view(batch_size, num_sent, -1)
        else:
            if sup_input_ids is not None:
                total = batch_size * num_sent
                sup_pooler_output = pooler_output[total:, :].view(sup_batch_size, sup_num_sent, -1)
                pooler_output = pooler_output[:total, :].view(batch_size, num_sent, -1)
                attention_mask = attention_mask[:total, :].view(batch_size, num_sent, -1)
            else:
                pooler_output = pooler_output.view((batch_size, num_sent, pooler_output.size(-1)))
                attention_mask = attention_mask.view(batch_size, num_sent, -1)

        if stage == "2" and apply_template_delta_train:
            pooler_output = pooler_output.clone()
            delta, template_len = self.get_delta(list(range(self.prefix_len // 2)))
            delta2, template_len2 = self.get_delta(list(range(self.prefix_len // 2, self.prefix_len)))
            counted = attention_mask if blen_rule == "official" else attention_mask[..., self.prefix_len:]
            blen = counted.sum(-1) - template_len
            pooler_output[:, 0, :] -= delta[blen[:, 0]]
            blen2 = counted.sum(-1) - template_len2
            pooler_output[:, 1, :] -= delta2[blen2[:, 1]]
            if num_sent == 3:
                pooler_output[:, 2, :] -= delta2[blen2[:, 2]]

        pooler_output = self.mlp(pooler_output)
        if stage == "2" and use_aux_loss and sup_input_ids is not None:
            sup_pooler_output = self.mlp(sup_pooler_output)

        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        z3 = pooler_output[:, 2] if num_sent == 3 else None
        if stage == "1":
            return self._nli(z1, z2, z3), pooler_output
        cos_sim = self._cos(z1.unsqueeze(1), z2.unsqueeze(0)) / self.temp
        if num_sent >= 3:
            cos_sim = torch.cat([cos_sim, self._cos(z1.unsqueeze(1), z3.unsqueeze(0)) / self.temp], 1)
        loss = torch.nn.functional.cross_entropy(cos_sim, torch.arange(cos_sim.size(0)))
        if use_aux_loss and sup_input_ids is not None:
            loss = loss + aux_weight * self._nli(*sup_pooler_output.unbind(1))
        return loss, pooler_output

    # models.py:359-405 with evaluation.py:79-94
    def batcher(self, tokenizer, sentences):
        template = TEMPLATE_00.replace('*mask*', tokenizer.mask_token).replace('_', ' ') \
            .replace('*sep+*', '').replace('*cls*', '')
        texts = [template.replace('*sent0*', s).strip() for s in sentences]
        # batch_encode_plus (gone in transformers 5) is the tokenizer's __call__ on a list
        batch = tokenizer(texts, return_tensors='pt', padding=True)
        input_ids = batch["input_ids"]
        assert bool((batch["token_type_ids"] == 0).all())
        past_key_values = self.get_prompt(list(range(self.prefix_len)), input_ids.shape[0])
        attention_mask = torch.cat((torch.ones(input_ids.shape[0], self.prefix_len),
                                    batch["attention_mask"]), dim=1).long()
        last_hidden = bert_415(self.bert, input_ids, attention_mask=attention_mask, past_key_values=past_key_values)
        return last_hidden[input_ids == self.mask_token_id], batch


# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------

def _close(a, b, tol=TIGHT, what=""):
    err = (a - b).abs().max().item()
    assert err < tol, f"{what}: max |kit - official| = {err:.3e} (tolerance {tol:.0e})"
    return err


def _loss_close(kit_loss, official_loss, what):
    """The kit's cross-entropy runs on float32 logits: float32 precision."""
    err = abs(kit_loss.item() - official_loss.item())
    assert err < 2e-6 * max(1.0, abs(official_loss.item())), f"{what}: kit {kit_loss.item()!r} vs official " \
                                                            f"{official_loss.item()!r} (diff {err:.3e})"


def _with(kit, **changes):
    old = {k: getattr(kit, k) for k in changes}
    for k, v in changes.items():
        setattr(kit, k, v)
    return old


@pytest.fixture(scope="module")
def inputs(setup):
    tokenizer = setup[0]
    semi = official_features(tokenizer, [SENTENCES, SENTENCES])
    short = [s for s in SENTENCES if len(tokenizer.encode(s, add_special_tokens=False)) < MAX_SEQ_LENGTH - 2]
    semi_short = official_features(tokenizer, [short, short])
    sup = official_features(tokenizer, [list(c) for c in zip(*NLI)])
    template = Template(tokenizer)
    for (ids, mask), columns in ((semi, [SENTENCES, SENTENCES]), (sup, [list(c) for c in zip(*NLI)])):
        for v, col in enumerate(columns):  # the kit's wrap_ids builds the same rows
            for i, s in enumerate(col):
                wrapped = template.wrap_ids(tokenizer(s, add_special_tokens=False)["input_ids"][:MAX_SEQ_LENGTH])
                n = int(mask[i, v].sum())
                assert ids[i, v, :n].tolist() == wrapped and not mask[i, v, n:].any()
    assert semi[1].sum(-1).max() == len(template) + MAX_SEQ_LENGTH  # the long sentence was cut
    assert sup[0].shape[-1] > semi_short[0].shape[-1]  # the official aux path pads the unsupervised rows
    return {"semi": semi, "sup": sup, "semi_short": semi_short}


def test_template_restatement_equals_the_kit(setup):
    tokenizer = setup[0]
    bs, es, enc_template = get_encoded_bs_and_es(TEMPLATE_00, tokenizer)
    template = Template(tokenizer)
    assert (template.before, template.after) == (bs, es) and bs + es == enc_template
    assert len(template) == len(enc_template)


# --------------------------------------------------------------------------------------------------------------
# 1. prefix attention
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given_positions", [False, True])
def test_prefix_attention_equals_transformers_415_past_key_values(setup, inputs, given_positions):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    ids, mask = inputs["semi"][0][:, 0], inputs["semi"][1][:, 0]
    B, L = ids.shape
    P = 2 * L_PREFIX
    g = torch.Generator().manual_seed(3)
    table = torch.randn(B, P, 2 * encoder.config.num_hidden_layers * encoder.config.hidden_size, generator=g,
                        dtype=torch.float64)
    prefix_mask = torch.ones(B, P, dtype=torch.long)
    prefix_mask[0, 1] = 0
    prefix_mask[1, :L_PREFIX] = 0
    prefix_mask[3, P - 1] = 0
    prefix_mask[4, :] = 0
    positions = (torch.arange(L) * 2 + 5).expand(B, L) if given_positions else None
    with torch.no_grad():
        got = encode_with_prefix(encoder, ids, mask, table, prefix_mask, positions, output_hidden_states=True)
        # the legacy tuple layout get_prompt builds (models.py:55-63), from the same (B, P, ...) table
        past = table.view(B, P, 2 * official.n_layer, official.n_head, official.n_embd).permute(2, 0, 3, 1, 4).split(2)
        want = bert_415(encoder, ids, torch.cat([prefix_mask, mask], 1), past, positions, all_layers=True)
    assert len(got.hidden_states) == len(want)
    for layer, (a, b) in enumerate(zip(got.hidden_states, want)):
        _close(a, b, what=f"hidden state {layer}")
    _close(got.last_hidden_state, want[-1], what="last hidden state")
    # sensitivity: the prefix matters, and so does its mask
    with torch.no_grad():
        unmasked = bert_415(encoder, ids, torch.cat([torch.ones_like(prefix_mask), mask], 1), past, positions)
    assert (unmasked[0] - want[-1][0]).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------------------------
# 2. stage 1
# --------------------------------------------------------------------------------------------------------------

def test_stage1_loss(setup, inputs):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    ids, mask = inputs["sup"]
    old = _with(kit, stage=1)
    try:
        with torch.no_grad():
            got = kit({"nli_input_ids": ids, "nli_attention_mask": mask})["loss"]
            z_kit = kit.mlp(kit.encode(ids, mask))
            want, z_off = official.cl_forward(sup_input_ids=ids, sup_attention_mask=mask, stage="1")
            wrong, _ = official.cl_forward(sup_input_ids=ids, sup_attention_mask=mask, stage="1", wrong_reshape=True)
    finally:
        _with(kit, **old)
    _close(z_kit, z_off, what="stage-1 MLP([MASK] state)")
    _loss_close(got, want, "stage-1 loss")
    assert abs(wrong.item() - want.item()) > 1e-4  # the reshape order of the prefix masks is seen


# --------------------------------------------------------------------------------------------------------------
# 3. stage 2, semi-supervised, template denoising (both offsets); 7. its gradients
# --------------------------------------------------------------------------------------------------------------

def _stage2(kit, batch, **changes):
    old = _with(kit, stage=2, **changes)
    try:
        loss = kit(batch)["loss"]
        pooled = kit.encode(batch["input_ids"], batch["attention_mask"])
        z = kit.mlp(kit.denoised(pooled, batch["attention_mask"]) if kit.denoise else pooled)
    finally:
        _with(kit, **old)
    return loss, z


@pytest.mark.parametrize("offset,rule", [("sentence+prefix", "official"), ("sentence", "sentence")])
def test_stage2_semi_loss_with_template_denoising(setup, inputs, offset, rule):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    ids, mask = inputs["semi"]
    with torch.no_grad():
        got, z_kit = _stage2(kit, {"input_ids": ids, "attention_mask": mask}, denoise_offset=offset, aux_weight=0.0)
        want, z_off = official.cl_forward(ids, mask, blen_rule=rule)
        other, _ = official.cl_forward(ids, mask, blen_rule="sentence" if rule == "official" else "official")
    _close(z_kit, z_off, what=f"stage-2 z ({offset})")
    _loss_close(got, want, f"stage-2 semi loss ({offset})")
    assert abs(other.item() - want.item()) > 1e-4  # the two delta rows differ measurably


def test_stage2_gradients(setup, inputs):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    ids, mask = inputs["semi"]
    batch = {"input_ids": ids, "attention_mask": mask}
    params = [kit.prefix_encoder.embedding.weight, encoder.encoder.layer[1].attention.self.key.weight,
              encoder.embeddings.position_embeddings.weight]
    want_loss, _ = official.cl_forward(ids, mask, blen_rule="official")
    want = torch.autograd.grad(want_loss, params)
    # the kit's graph up to the sentence vectors, closed by the official float64 InfoNCE: tight
    _, z = _stage2(kit, batch, denoise_offset="sentence+prefix", aux_weight=0.0)
    cos = official._cos(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0)) / TEMP
    tight = torch.autograd.grad(torch.nn.functional.cross_entropy(cos, torch.arange(len(z))), params)
    # the kit's own loss (float32 cross-entropy): float32 precision
    loss, _ = _stage2(kit, batch, denoise_offset="sentence+prefix", aux_weight=0.0)
    full = torch.autograd.grad(loss, params)
    for name, w, t, f in zip(("prefix embedding", "layer-1 key weight", "position embeddings"), want, tight, full):
        assert w.abs().max() > 1e-4, name  # the gradient is not trivially zero
        _close(t, w, tol=1e-10, what=f"d loss / d {name} (float64 loss on the kit's z)")
        _close(f, w, tol=1e-5 * w.abs().max().item(), what=f"d loss / d {name} (the kit's loss)")


# --------------------------------------------------------------------------------------------------------------
# 4. stage 2 with the auxiliary NLI loss
# --------------------------------------------------------------------------------------------------------------

def test_stage2_semi_with_aux_loss(setup, inputs):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    (ids, mask), (nli_ids, nli_mask) = inputs["semi_short"], inputs["sup"]
    batch = {"input_ids": ids, "attention_mask": mask, "nli_input_ids": nli_ids, "nli_attention_mask": nli_mask}
    with torch.no_grad():
        got, z_kit = _stage2(kit, batch, denoise_offset="sentence+prefix", aux_weight=0.3)
        z_nli = kit.mlp(kit.encode(nli_ids, nli_mask))
        want, z_off = official.cl_forward(ids, mask, nli_ids, nli_mask, use_aux_loss=True, aux_weight=0.3)
        alone, _ = official.cl_forward(ids, mask)
        aux, z_nli_off = official.cl_forward(sup_input_ids=nli_ids, sup_attention_mask=nli_mask, stage="1")
    _close(z_kit, z_off, what="stage-2 z beside the NLI rows")
    _close(z_nli, z_nli_off, what="NLI rows' MLP([MASK] state)")
    _close(want, alone + 0.3 * aux, what="official: aux = stage-1 CE of the NLI rows in the same batch")
    _loss_close(got, want, "stage-2 semi + 0.3 aux loss")
    assert 0.3 * aux.item() > 1e-2


# --------------------------------------------------------------------------------------------------------------
# 5. stage 2, supervised (3 views)
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("offset,rule", [("sentence+prefix", "official"), ("sentence", "sentence")])
def test_stage2_supervised(setup, inputs, offset, rule):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    ids, mask = inputs["sup"]
    with torch.no_grad():
        got, z_kit = _stage2(kit, {"input_ids": ids, "attention_mask": mask}, denoise_offset=offset, aux_weight=0.0)
        want, z_off = official.cl_forward(ids, mask, blen_rule=rule)
    _close(z_kit, z_off, what=f"supervised z ({offset})")
    _loss_close(got, want, f"supervised loss ({offset})")


# --------------------------------------------------------------------------------------------------------------
# 6. test-time embedding
# --------------------------------------------------------------------------------------------------------------

def test_test_time_embedding(setup):
    tokenizer, encoder, kit = setup
    official = Official(kit, tokenizer)
    sentences = SENTENCES + [p for t in NLI for p in t]
    prefixed, pooler = kit.test_model()
    assert isinstance(prefixed, PrefixedEncoder) and pooler == "prompt_mask"
    with torch.no_grad():
        want, batch = official.batcher(tokenizer, sentences)
        out = prefixed(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        direct = out.last_hidden_state[batch["input_ids"] == tokenizer.mask_token_id]
    _close(direct, want, what="PrefixedEncoder [MASK] state (float64)")
    got = Encoder(prefixed, tokenizer, "prompt_mask", progress=False, device="cpu").encode(sentences)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))
