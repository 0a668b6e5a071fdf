"""PromptBERT's objective in the kit (cse_kit/methods/promptbert.py, cse_kit/eval/prompt.py) against an independent float64
restatement of the official code (kongds/Prompt-BERT@690ba6ef3a1d954c24d9a992ff8e339816866a05), on identical weights.

Restated here, without calling the kit:
  * run.sh:80-81, 98-99, 116, 131: the template strings of the four scripts;
  * train.py:617-641 (template -> bs / es, RoBERTa's bs stripped), :673-699 (prepare_features: the sentence's
    sub-words cut to max_seq_length, view 0 wrapped in bs / es, views 1 and 2 in bs2 / es2, right-padded), :778-800
    (model.bs, mask_embedding_template, mask_embedding_template2), :581-584 (sup-bert's head: BERT's MLM transform);
  * prompt_bert/models.py:22-36 MLPLayer, :78-108 get_delta (50 rows, positions from 0, the shift after
    len(cls.bs) + 1), :110-113, :144-191 (one encoder pass, [MASK] pooling, template denoising per template, the
    transform before it or the MLP after it), :194-258 (InfoNCE with the hard negatives' zero weights);
  * evaluation.py:47-70 (get_delta, 256 rows), :193-202 (the template filled with text, a period appended),
    :229-233, :292-307 (pooling, org_mlp, delta, use_pooler);
  * transformers 4.2.1's BertModel and RobertaModel by hand (requirements.txt:1): RoBERTa's position ids from the
    input ids, padding_idx + 1 on; BertPredictionHeadTransform (dense, gelu, LayerNorm).

RoBERTa runs with a byte-level BPE tokenizer trained here on the test sentences (no RoBERTa checkpoint offline), so
its templates' blanks, the leading-space pieces and <mask> tokenize as RoBERTa's do.

Dropout cannot differ: the models are in eval(). The kit computes its cross-entropy on float32 logits, so the losses
agree to float32 precision; the sentence vectors, and the gradients of a float64 loss through the kit's graph, agree
to ~1e-10."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cse_kit.eval.encode import Encoder, pad_ids
from cse_kit.methods.promptbert import TEMPLATES, PromptBERT, first_position, rewrap
from cse_kit.models import build_smoke_model
from cse_kit.eval.prompt import PromptReading, Template

from conftest import rerandomize

TIGHT = 1e-10
MAX_SEQ_LENGTH = 12  # data_args.max_seq_length, small so that the long sentence is cut
TEMP = 0.05
#: run.sh:98-99 (unsup-bert; sup-bert :131 is the first), run.sh:80-81 (unsup-roberta; sup-roberta :116 the first)
OFFICIAL_TEMPLATES = {"bert": ('*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*',
                               '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'),
                      "roberta": ("*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",
                                  "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*")}

SENTENCES = ["A man is playing a guitar.", "The cat sleeps.", "A dog barks.",
             "Two dogs run through the deep snow, chasing a small red ball across the frozen field.",
             'She said "no" twice.', "Rain falls?"]
NLI = [("A woman is slicing an onion.", "Someone cuts a vegetable.", "The woman is asleep in bed."),
       ("Kids play soccer in a park on a sunny afternoon.", "Children are outside.", "The kids are in a classroom."),
       ("A dog barks.", "An animal makes noise.", "A cat sleeps quietly on the warm windowsill all day long.")]


# --------------------------------------------------------------------------------------------------------------
# the models, on identical weights
# --------------------------------------------------------------------------------------------------------------


def _roberta_tokenizer():
    """A byte-level BPE tokenizer with RoBERTa's special tokens, trained on the test's sentences."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer()
    corpus = SENTENCES + [s for t in NLI for s in t] + ["This sentence : ' ' means.", "The sentence means."]
    bpe.train_from_iterator(corpus * 3, vocab_size=1000, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return RobertaTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")


@pytest.fixture(scope="module", params=["bert", "roberta"])
def backbone(request):
    """(name, tokenizer, float64 encoder in eval mode)."""
    from transformers import RobertaConfig, RobertaModel

    if request.param == "bert":
        tokenizer, encoder = build_smoke_model("smoke-bert", num_hidden_layers=3)
    else:
        tokenizer = _roberta_tokenizer()
        encoder = RobertaModel(RobertaConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                             hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                             intermediate_size=64, max_position_embeddings=512),
                               add_pooling_layer=False)
    encoder = encoder.double().eval()
    rerandomize(encoder, 1, 0.25)
    return request.param, tokenizer, encoder


def _kit(backbone, supervised, variant, test="plain", dev="test"):
    """The kit's objective on the backbone's encoder: the official script's settings (run.sh)."""
    from transformers.models.bert.modeling_bert import BertPredictionHeadTransform

    name, tokenizer, encoder = backbone
    first, second = TEMPLATES[name]
    transform = None
    if supervised and name == "bert":  # sup-bert: --mask_embedding_sentence_org_mlp, no MLPLayer
        transform = BertPredictionHeadTransform(encoder.config).double().eval()
        rerandomize(transform, 20, 0.4)
    torch.manual_seed(0)
    kit = PromptBERT(encoder, tokenizer, template=first, template2=None if supervised else second, temp=TEMP,
                     mlp=transform is None, mlm_transform=transform,
                     pooler="prompt_mask_denoised" if supervised else "prompt_mask",
                     denoise_positions={"paper": "sentence", "official-code": "from-zero"}[variant],
                     promptbert_test=test, promptbert_dev=dev).double().eval()
    rerandomize(kit.mlp, 10, 0.4)
    return kit


# --------------------------------------------------------------------------------------------------------------
# transformers 4.2.1 BertModel / RobertaModel, by hand
# --------------------------------------------------------------------------------------------------------------

def _layer_norm(x, ln):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _linear(x, lin):
    return x @ lin.weight.T + lin.bias


def _gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def model_421(model, input_ids, attention_mask=None, position_ids=None):
    """last_hidden_state of transformers 4.2.1's BertModel / RobertaModel (RoBERTa: create_position_ids_from_input_ids
    when no position ids are given)."""
    config = model.config
    assert config.hidden_act == "gelu"
    B, L = input_ids.shape
    H, nh = config.hidden_size, config.num_attention_heads
    hd = H // nh
    if attention_mask is None:
        attention_mask = torch.ones(B, L)
    bias = (1.0 - attention_mask[:, None, None, :].to(torch.float64)) * -10000.0
    if position_ids is None:
        if config.model_type == "roberta":
            keep = input_ids.ne(config.pad_token_id).int()
            position_ids = (torch.cumsum(keep, dim=1) * keep).long() + config.pad_token_id
        else:
            position_ids = torch.arange(L).expand(B, L)
    e = model.embeddings
    # nn.Embedding(..., padding_idx): the pad row gets no gradient (word embeddings; RoBERTa's positions too)
    pad = config.pad_token_id
    x = (F.embedding(input_ids, e.word_embeddings.weight, padding_idx=pad)
         + e.token_type_embeddings.weight[torch.zeros_like(input_ids)]
         + F.embedding(position_ids, e.position_embeddings.weight,
                       padding_idx=pad if config.model_type == "roberta" else None))
    x = _layer_norm(x, e.LayerNorm)

    def heads(t):
        return t.view(B, -1, nh, hd).permute(0, 2, 1, 3)

    for layer in model.encoder.layer:
        a = layer.attention.self
        q, k, v = heads(_linear(x, a.query)), heads(_linear(x, a.key)), heads(_linear(x, a.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + bias
        ctx = (torch.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B, L, H)
        h = _layer_norm(_linear(ctx, layer.attention.output.dense) + x, layer.attention.output.LayerNorm)
        x = _layer_norm(_linear(_gelu(_linear(h, layer.intermediate.dense)), layer.output.dense) + h,
                        layer.output.LayerNorm)
    return x


# --------------------------------------------------------------------------------------------------------------
# the official PromptBERT code (train.py, models.py, evaluation.py)
# --------------------------------------------------------------------------------------------------------------

def official_bs_es(template, tokenizer, roberta):
    """train.py:617-629 (and :630-641 for the second template): the strings before and after the sentence."""
    assert ' ' not in template
    template = template.replace('*mask*', tokenizer.mask_token).replace('*sep+*', '').replace('*cls*', '') \
        .replace('*sent_0*', ' ').split(' ')
    bs = template[0].replace('_', ' ')
    if roberta:  # 'roberta' in model_args.model_name_or_path
        bs = bs.strip()
    return bs, template[1].replace('_', ' ')


class Official:
    """BertForCL / RobertaForCL (models.py:387-494) with train.py's attributes, around the kit's weights."""

    def __init__(self, kit, tokenizer, templates, *, org_mlp=False, roberta=False, position_start=0):
        self.kit, self.encoder, self.tokenizer = kit, kit and kit.encoder, tokenizer
        self.org_mlp, self.temp = org_mlp, TEMP
        self.mask_token_id = tokenizer.mask_token_id
        # models.py:96 counts the template's positions from 0; position_start > 0 is the paper's rule, for RoBERTa
        self.position_start = position_start
        (bs, es), *rest = [official_bs_es(t, tokenizer, roberta) for t in templates]
        self.bs_es = [(bs, es), *rest]
        # train.py:783-800
        self.bs = tokenizer.encode(bs, add_special_tokens=False)
        self.es = tokenizer.encode(es, add_special_tokens=False)
        self.mask_embedding_template = tokenizer.encode(bs + es)
        es_ids = tokenizer.encode(es, add_special_tokens=False)
        assert self.mask_embedding_template[1:-1] == self.bs + es_ids  # train.py:793-794
        self.mask_embedding_template2 = tokenizer.encode(rest[0][0] + rest[0][1]) if rest else None

    def features(self, columns):
        """train.py:673-699: columns = [sent0s, sent1s(, sent2s)] -> input_ids, attention_mask (total, views, ml)."""
        tok = self.tokenizer
        (bs_s, es_s), (bs2_s, es2_s) = self.bs_es[0], self.bs_es[-1]
        bs, es = tok.encode(bs_s)[:-1], tok.encode(es_s)[1:]
        bs2, es2 = tok.encode(bs2_s)[:-1], tok.encode(es2_s)[1:]
        total = len(columns[0])
        ids = []
        for i, s in enumerate(s for col in columns for s in col):
            s = tok.encode(s, add_special_tokens=False)[:MAX_SEQ_LENGTH]
            ids.append(bs + s + es if i < total else bs2 + s + es2)
        ml = max(len(i) for i in ids)
        mask = [len(i) * [1] + (ml - len(i)) * [0] for i in ids]
        ids = [i + [tok.pad_token_id] * (ml - len(i)) for i in ids]
        pick = lambda rows: torch.tensor([[rows[i + v * total] for v in range(len(columns))] for i in range(total)])
        return pick(ids), pick(mask)

    # models.py:22-36 (MLPLayer.dense = the kit's mlp[0]); org_mlp: BertPredictionHeadTransform (train.py:581-584)
    def mlp(self, x):
        if self.org_mlp:
            t = self.kit.mlm_transform
            return _layer_norm(_gelu(_linear(x, t.dense)), t.LayerNorm)
        return torch.tanh(_linear(x, self.kit.mlp[0]))

    # models.py:78-108
    def get_delta(self, template_token, length=50):
        d_input_ids = torch.Tensor(template_token).repeat(length, 1).long()
        d_position_ids = torch.arange(d_input_ids.shape[1]).unsqueeze(0).repeat(length, 1).long() + self.position_start
        d_position_ids[:, len(self.bs) + 1:] += torch.arange(length).unsqueeze(-1)
        m_mask = d_input_ids == self.mask_token_id
        last_hidden = model_421(self.encoder, d_input_ids, position_ids=d_position_ids)
        delta = last_hidden[m_mask]
        if self.org_mlp:
            delta = self.mlp(delta)
        return delta, d_input_ids.shape[1]

    # models.py:110-258 (delta on, no autoprompt, one process); returns (loss, pooler_output)
    def cl_forward(self, input_ids, attention_mask):
        delta, template_len = self.get_delta([self.mask_embedding_template])
        different = self.mask_embedding_template2 is not None
        if different:
            delta1, template_len1 = self.get_delta([self.mask_embedding_template2])
        batch_size, num_sent = input_ids.shape[:2]
        input_ids = input_ids.view(-1, input_ids.size(-1))
        attention_mask = attention_mask.view(-1, attention_mask.size(-1))
        last_hidden = model_421(self.encoder, input_ids, attention_mask=attention_mask)
        pooler_output = last_hidden[input_ids == self.mask_token_id]
        if self.org_mlp:
            pooler_output = self.mlp(pooler_output)
        if different:
            pooler_output = pooler_output.view(batch_size, num_sent, -1)
            attention_mask = attention_mask.view(batch_size, num_sent, -1)
            blen = attention_mask.sum(-1) - template_len
            pooler_output[:, 0, :] -= delta[blen[:, 0]]
            blen = attention_mask.sum(-1) - template_len1
            pooler_output[:, 1, :] -= delta1[blen[:, 1]]
            if num_sent == 3:
                pooler_output[:, 2, :] -= delta1[blen[:, 2]]
        else:
            blen = attention_mask.sum(-1) - template_len
            pooler_output -= delta[blen]
        pooler_output = pooler_output.view(batch_size, num_sent, -1)
        if not self.org_mlp:
            pooler_output = self.mlp(pooler_output)
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        cos_sim = self._cos(z1.unsqueeze(1), z2.unsqueeze(0)) / self.temp
        if num_sent == 3:
            z1_z3_cos = self._cos(z1.unsqueeze(1), pooler_output[:, 2].unsqueeze(0)) / self.temp
            cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)
            n, z3_weight = len(z1), 0.0  # --hard_negative_weight's default (train.py:95-100), added to the z3 pair
            cos_sim = cos_sim + torch.cat([torch.zeros(n, n), z3_weight * torch.eye(n)], 1)
        loss = torch.nn.functional.cross_entropy(cos_sim, torch.arange(cos_sim.size(0)))
        return loss, pooler_output

    @staticmethod
    def _cos(x, y):
        return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))

    # trainers.py:105-117 (the dev batcher) through models.py:275-375 (sentemb_forward: delta on, no autoprompt,
    # mask_embedding_sentence_avg off); mlp_only_train: the unsupervised scripts' --mlp_only_train (run.sh:83, 101)
    def sentemb_forward(self, sentences, mlp_only_train):
        tokenizer, pad = self.tokenizer, self.tokenizer.pad_token_id
        batch = tokenizer(list(sentences), padding=True)  # batch_encode_plus of SentEval's ' '.join(tokens)
        d_input_ids = torch.Tensor([self.mask_embedding_template]).repeat(128, 1).long()
        d_position_ids = torch.arange(d_input_ids.shape[1]).unsqueeze(0).repeat(128, 1).long() + self.position_start
        d_position_ids[:, len(self.bs) + 1:] += torch.arange(128).unsqueeze(-1)
        delta = model_421(self.encoder, d_input_ids, position_ids=d_position_ids)[d_input_ids == self.mask_token_id]
        template_len = d_input_ids.shape[1]
        bs, es = torch.LongTensor(self.bs), torch.LongTensor(self.es)
        new_input_ids = []
        for i in torch.tensor(batch['input_ids']):
            ii = i[i != pad]
            ni = [ii[:1], bs]
            if ii.shape[0] > 2:
                ni += [ii[1:-1]]
            ni += [es, ii[-1:]]
            if ii.shape[0] < i.shape[0]:
                ni += [i[i == pad]]
            new_input_ids.append(torch.cat(ni))
        input_ids = torch.stack(new_input_ids)
        attention_mask = (input_ids != pad).long()
        last_hidden = model_421(self.encoder, input_ids, attention_mask=attention_mask)
        pooler_output = last_hidden[input_ids == self.mask_token_id]
        blen = attention_mask.sum(-1) - template_len
        if self.org_mlp and not mlp_only_train:
            pooler_output, delta = self.mlp(pooler_output), self.mlp(delta)
        pooler_output = pooler_output - delta[blen]
        pooler_output = pooler_output.view(input_ids.shape[0], -1, pooler_output.shape[-1]).mean(1)
        if not mlp_only_train and not self.org_mlp:
            pooler_output = self.mlp(pooler_output)
        return pooler_output

    # evaluation.py:47-70
    def eval_delta(self, template):
        tokenizer = self.tokenizer
        template = template.replace('*mask*', tokenizer.mask_token).replace('*sep+*', '').replace('*cls*', '') \
            .replace('*sent_0*', ' ')
        bs_length = len(tokenizer.encode(template.split(' ')[0].replace('_', ' ').strip())) - 2 + 1
        batch = tokenizer([template.replace('_', ' ').strip().replace('   ', ' ')], return_tensors='pt')
        position_ids = torch.arange(batch['input_ids'].shape[1]).unsqueeze(0).repeat(256, 1) + self.position_start
        input_ids = batch['input_ids'].repeat(256, 1)
        position_ids[:, bs_length:] += torch.arange(256).unsqueeze(-1)
        last_hidden = model_421(self.encoder, input_ids, position_ids=position_ids)
        return last_hidden[input_ids == tokenizer.mask_token_id], input_ids.shape[1]

    # evaluation.py:187-307 (no autoprompt, fp32): --mask_embedding_sentence with the other flags as given
    def batcher(self, template, sentences, delta=False, org_mlp=False, use_pooler=False):
        tokenizer = self.tokenizer
        filled = template.replace('*mask*', tokenizer.mask_token).replace('_', ' ').replace('*sep+*', '') \
            .replace('*cls*', '')
        sentences = list(sentences)
        for i, s in enumerate(sentences):
            if len(s) > 0 and s[-1] not in '.?"\'':
                s += '.'
            sentences[i] = filled.replace('*sent 0*', s).strip()
        batch = tokenizer(sentences, return_tensors='pt', padding=True)  # batch_encode_plus (gone in transformers 5)
        last_hidden = model_421(self.encoder, batch['input_ids'], attention_mask=batch['attention_mask'])
        pooler_output = last_hidden[batch['input_ids'] == tokenizer.mask_token_id]
        if org_mlp:
            pooler_output = self.mlp(pooler_output)
        if delta:
            d, template_len = self.eval_delta(template)
            blen = batch['attention_mask'].sum(-1) - template_len
            pooler_output = pooler_output - (self.mlp(d[blen]) if org_mlp else d[blen])
        if use_pooler:  # the trained MLPLayer, renamed pooler by run.sh:187-188
            pooler_output = self.mlp(pooler_output)
        return pooler_output, sentences


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


def _sentence_start(backbone):
    """The position id of a row's first token: RoBERTa's create_position_ids_from_input_ids gives padding_idx + 1,
    BERT 0. The paper's denoising rows start there."""
    name, tokenizer, _ = backbone
    return tokenizer.pad_token_id + 1 if name == "roberta" else 0


def _official(kit, backbone, supervised, variant):
    name, tokenizer, _ = backbone
    templates = OFFICIAL_TEMPLATES[name][:1] if supervised else OFFICIAL_TEMPLATES[name]
    return Official(kit, tokenizer, templates, org_mlp=supervised and name == "bert", roberta=name == "roberta",
                    position_start=_sentence_start(backbone) if variant == "paper" else 0)


def kit_batch(tokenizer, template, columns):
    """What the kit's data layer gives the objective: every view's sub-words cut to MAX_SEQ_LENGTH and wrapped in
    the first template (cse_kit.train.data.tokenize), right-padded to the longest (Batches._pad)."""
    rows = [[template.wrap_ids(tokenizer(s, add_special_tokens=False)["input_ids"][:MAX_SEQ_LENGTH]) for s in col]
            for col in columns]
    ids, mask = pad_ids([r for col in rows for r in col], tokenizer.pad_token_id)
    views, total = len(columns), len(columns[0])
    return {"input_ids": ids.view(views, total, -1).transpose(0, 1), "attention_mask":
            mask.view(views, total, -1).transpose(0, 1)}


UNSUP = [SENTENCES, SENTENCES]
SUP = [list(c) for c in zip(*NLI)]


def test_template_restatement_equals_the_kit(backbone):
    name, tokenizer, _ = backbone
    official = Official(None, tokenizer, OFFICIAL_TEMPLATES[name], roberta=name == "roberta")
    firsts = []
    for (bs, es), text in zip(official.bs_es, TEMPLATES[name]):
        template = Template(tokenizer, text)
        assert template.before == tokenizer.encode(bs)[:-1] and template.after == tokenizer.encode(es)[1:]
        assert template.before + template.after == tokenizer.encode(bs + es)  # the denoising template (train.py:786)
        firsts.append(len(template.before))
    # models.py:98 shifts the second template's positions after len(cls.bs) + 1, the FIRST template's: harmless for
    # the official pairs, whose texts before the sentence have as many tokens (the kit uses each template's own)
    assert firsts[0] == firsts[1] == len(official.bs) + 1


def test_the_second_template_rows_equal_prepare_features(backbone):
    name, tokenizer, _ = backbone
    first, second = (Template(tokenizer, t) for t in TEMPLATES[name])
    official = Official(None, tokenizer, OFFICIAL_TEMPLATES[name], roberta=name == "roberta")
    want_ids, want_mask = official.features(UNSUP)
    batch = kit_batch(tokenizer, first, UNSUP)
    assert torch.equal(batch["input_ids"][:, 0], want_ids[:, 0]) and torch.equal(batch["attention_mask"], want_mask)
    assert want_mask[:, 0].sum(-1).max() == len(first) + MAX_SEQ_LENGTH  # the long sentence was cut
    ids, mask = rewrap(batch["input_ids"][:, 1], batch["attention_mask"][:, 1], first, second, tokenizer.pad_token_id)
    assert torch.equal(ids, want_ids[:, 1]) and torch.equal(mask, want_mask[:, 1])


# --------------------------------------------------------------------------------------------------------------
# the training loss: unsupervised (two templates) and supervised (NLI triplets), each variant
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("supervised", [False, True], ids=["unsup", "sup"])
@pytest.mark.parametrize("variant", ["official-code", "paper"])
def test_loss_equals_the_official_forward(backbone, supervised, variant):
    name, tokenizer, _ = backbone
    kit = _kit(backbone, supervised, variant)
    official = _official(kit, backbone, supervised, variant)
    columns = SUP if supervised else UNSUP
    batch = kit_batch(tokenizer, kit.template, columns)
    ids, mask = official.features(columns)
    with torch.no_grad():
        got = kit(batch)["loss"]
        z_kit = kit.vectors(batch["input_ids"], batch["attention_mask"])
        want, z_off = official.cl_forward(ids, mask)
        official.position_start = _sentence_start(backbone) - official.position_start  # the other variant's rule
        other, _ = official.cl_forward(ids, mask)
    _close(z_kit, z_off, what=f"{name} {variant} z")
    _loss_close(got, want, f"{name} {'sup' if supervised else 'unsup'} {variant} loss")
    assert first_position(kit.encoder) == _sentence_start(backbone)
    if name == "roberta":  # the denoising rows' positions are seen
        assert abs(other.item() - want.item()) > 1e-4
    else:  # BERT counts from 0: both variants are the official code
        assert other.item() == want.item()


def test_gradients(backbone):
    name, tokenizer, encoder = backbone
    kit = _kit(backbone, False, "official-code")
    official = _official(kit, backbone, False, "official-code")
    batch = kit_batch(tokenizer, kit.template, UNSUP)
    ids, mask = official.features(UNSUP)
    params = [kit.mlp[0].weight, encoder.encoder.layer[1].attention.self.key.weight,
              encoder.embeddings.position_embeddings.weight]
    want = torch.autograd.grad(official.cl_forward(ids, mask)[0], params)
    # the kit's graph up to the sentence vectors, closed by the official float64 InfoNCE: tight
    z = kit.vectors(batch["input_ids"], batch["attention_mask"])
    cos = Official._cos(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0)) / TEMP
    tight = torch.autograd.grad(torch.nn.functional.cross_entropy(cos, torch.arange(len(z))), params)
    full = torch.autograd.grad(kit(batch)["loss"], params)  # the kit's own loss: float32 cross-entropy
    for what, w, t, f in zip(("MLP weight", "layer-1 key weight", "position embeddings"), want, tight, full):
        assert w.abs().max() > 1e-4, what  # not trivially zero
        _close(t, w, tol=1e-10, what=f"{name}: d loss / d {what} (float64 loss on the kit's z)")
        _close(f, w, tol=1e-5 * w.abs().max().item(), what=f"{name}: d loss / d {what} (the kit's loss)")


@pytest.mark.parametrize("supervised", [False, True], ids=["unsup", "sup"])
def test_the_training_vectors_are_the_first_templates(backbone, supervised):
    """What the semi-supervised NLI head reads: every view in the first template, denoised, through the head; the
    official forward with one template (the supervised scripts') computes it."""
    name, tokenizer, _ = backbone
    kit = _kit(backbone, supervised, "official-code")
    official = _official(kit, backbone, True, "official-code")
    official.org_mlp = supervised and name == "bert"
    batch = kit_batch(tokenizer, kit.template, SUP)
    with torch.no_grad():
        got = kit.embed(batch)
        _, want = official.cl_forward(*official.features(SUP))
    _close(got, want, what=f"{name} embed")


# --------------------------------------------------------------------------------------------------------------
# test time: evaluation.py
# --------------------------------------------------------------------------------------------------------------

#: test sentences: some end in none of . ? " ' (evaluation.py:201 appends a period to those, "!" included)
EVAL_SENTENCES = SENTENCES + [p for t in NLI for p in t] + ["Rain falls", "What a goal!", "a man 's hat"]


def _reading_flags(name, supervised):
    """run.sh's eargs for the script (unsup :88-89, 106-107; sup-roberta :120-123; sup-bert :137-140)."""
    return {"delta": supervised, "org_mlp": supervised and name == "bert", "use_pooler": supervised and name == "roberta"}


def _encode(model, tokenizer, pooler, reading, sentences):
    return Encoder(model, tokenizer, pooler, progress=False, device="cpu", template=reading).encode(sentences)


def _assert_vectors(got, want, what):
    want = want.numpy() if isinstance(want, torch.Tensor) else want
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    assert err < 1e-5 * scale, f"{what}: max |kit - official| = {err:.3e} (scale {scale:.3e})"


def _relative(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("supervised", [False, True], ids=["unsup", "sup"])
def test_official_code_export_is_read_as_evaluation_py(backbone, supervised, tmp_path):
    """official-code: the export's cse_kit.json and head, read back as `cse-kit eval --model` reads them
    (load_model, ExportSettings.prompt), give evaluation.py's vector with run.sh's eargs: the period of :201, the trained
    head of the supervised scripts (sup-bert: T(h) - T(delta) with the trained transform, :104-117, 295-302;
    sup-roberta: the trained MLP after the subtraction, renamed pooler by run.sh:175-200, :305-307)."""
    from cse_kit.models import load_model
    from cse_kit.train.export import ExportSettings, export_encoder

    name, tokenizer, _ = backbone
    kit = _kit(backbone, supervised, "official-code", test="official")
    official = _official(kit, backbone, supervised, "official-code")
    model, pooler = kit.test_model()
    export_encoder(model, tokenizer, tmp_path / "model", {"pooler": pooler}, kit.test_reading())
    meta = json.loads((tmp_path / "model" / "cse_kit.json").read_text())
    head = {"bert": "mlm_transform", "roberta": "mlp"}[name] if supervised else None
    assert meta["prompt"] == {"template": TEMPLATES[name][0], "fill": "text", "append_period": True,
                              "denoise_positions": "from-zero", "head": head}
    assert (tmp_path / "model" / "prompt_head.safetensors").is_file() == supervised
    loaded_tokenizer, loaded = load_model(str(tmp_path / "model"))
    got = _encode(loaded.double(), loaded_tokenizer, meta["pooler"], ExportSettings(tmp_path / "model").prompt,
                  EVAL_SENTENCES)
    with torch.no_grad():
        want, _ = official.batcher(OFFICIAL_TEMPLATES[name][0], EVAL_SENTENCES, **_reading_flags(name, supervised))
    _assert_vectors(got, want, f"{name} {'sup' if supervised else 'unsup'} test vector")
    # what the kit read before: the sentence as given and no head
    before = _encode(kit.encoder, tokenizer, pooler, TEMPLATES[name][0], EVAL_SENTENCES)
    assert _relative(before, want.numpy()) > 1e-3


@pytest.mark.parametrize("supervised", [False, True], ids=["unsup", "sup"])
def test_official_code_dev_vector_is_the_trainers(backbone, supervised):
    """official-code selects the checkpoint on the trainer's dev vector (trainers.py:105-117, sentemb_forward):
    the sentence's own ids in the template, no period, denoised (all four scripts train with delta), through the
    head unless --mlp_only_train. The unsupervised scripts' test vector is not denoised, so it differs."""
    name, tokenizer, _ = backbone
    kit = _kit(backbone, supervised, "official-code", dev="official")
    official = _official(kit, backbone, supervised, "official-code")
    pooler, reading = kit.dev_reading()
    got = _encode(kit.encoder, tokenizer, pooler, reading, EVAL_SENTENCES)
    with torch.no_grad():
        want = official.sentemb_forward(EVAL_SENTENCES, mlp_only_train=not supervised)
    _assert_vectors(got, want, f"{name} {'sup' if supervised else 'unsup'} dev vector")
    test_pooler, test_reading = kit.test_model()[1], kit.test_reading()
    assert _relative(_encode(kit.encoder, tokenizer, test_pooler, test_reading, EVAL_SENTENCES), want.numpy()) > 1e-3


@pytest.mark.parametrize("supervised", [False, True], ids=["unsup", "sup"])
def test_paper_variant_reads_the_sentence_as_given_without_a_head(backbone, supervised):
    """paper: test and dev read the test vector, the sentence as given, no head: the numbers the kit gave before
    (the template text alone, read with the Encoder's defaults), except that the test denoising now starts where
    training's did (RoBERTa: padding_idx + 1; evaluation.py's get_delta, restated from there)."""
    name, tokenizer, _ = backbone
    kit = _kit(backbone, supervised, "paper")
    official = _official(kit, backbone, supervised, "paper")  # position_start: the sentence's first position
    model, pooler = kit.test_model()
    assert kit.dev_reading() == (pooler, kit.test_reading())
    assert kit.test_reading() == PromptReading(TEMPLATES[name][0], denoise_positions="sentence")
    got = _encode(model, tokenizer, pooler, kit.test_reading(), EVAL_SENTENCES)
    before = _encode(model, tokenizer, pooler, TEMPLATES[name][0], EVAL_SENTENCES)
    with torch.no_grad():
        plain = [s for s in EVAL_SENTENCES if s[-1] in '.?"\'']  # evaluation.py adds no period to these
        want, _ = official.batcher(OFFICIAL_TEMPLATES[name][0], plain, delta=supervised)
    _assert_vectors(_encode(model, tokenizer, pooler, kit.test_reading(), plain), want, f"{name} paper test vector")
    if supervised and name == "roberta":  # the one number that moves: the test denoising's positions
        assert _relative(got, before) > 1e-3
    else:
        np.testing.assert_array_equal(got, before)
