"""A position jump inside one sequence: PromptBERT's template denoising (and DiffAug's, from it) encodes the empty
template with the positions after the sentence slot moved by the sentence's length (Template.denoising_inputs). From
transformers 5.25, an encoder called with position_ids and no attention_mask reads such a jump as the start of a
second packed sequence (find_packed_sequence_indices) and attends each part alone, so [MASK] stops seeing the words
before the slot. The kit passes an all-ones mask wherever it feeds a jump; these tests hold its denoising vectors,
at evaluation and in training, against the encoder's layers called one by one here with no mask at all (every token
attends to every other, whatever a library's mask logic does), and check that every encoder call the kit makes with
a jump carries a mask."""

import numpy as np
import pytest
import torch

from cse_kit.eval.encode import Encoder
from cse_kit.eval.prompt import Template, mask_states
from cse_kit.methods.promptbert import PromptBERT

ATOL = 1e-5  # fp32 sums of one tiny BERT in other orders
SENTENCES = ["A man is playing a guitar.", "Two dogs run through the snow, chasing a red ball!", "The cat sleeps."]


def layer_by_layer(model, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """BERT's last hidden states from its embeddings and layers called directly, with no attention mask: one sequence,
    every token attending to every other (no library mask logic between them)."""
    hidden = model.embeddings(input_ids=ids, position_ids=positions)
    for layer in model.encoder.layer:
        out = layer(hidden)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def full_and_split(model, template: Template, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty template's [MASK] state at a sentence length: attending the whole template (as the papers' code on
    the transformers it ran on), and attending only the part after the jump (what a packed-sequence reading gives)."""
    ids, positions = template.denoising_inputs(torch.tensor([length]))
    after = len(template.before)
    with torch.no_grad():
        full = mask_states(layer_by_layer(model, ids, positions), ids, template.mask_token_id)[0]
        split = mask_states(layer_by_layer(model, ids[:, after:], positions[:, after:]), ids[:, after:],
                            template.mask_token_id)[0]
    return full, split


@pytest.fixture
def jump_calls_have_a_mask(tiny_bert):
    """Fails the test where the kit calls the encoder with a position jump and no attention mask (whatever the
    installed transformers makes of it)."""
    _, model = tiny_bert
    unmasked = []

    def check(module, args, kwargs):
        positions = kwargs.get("position_ids")
        if positions is not None and kwargs.get("attention_mask") is None and (positions.diff(dim=-1) != 1).any():
            unmasked.append(positions.tolist())

    handle = model.register_forward_pre_hook(check, with_kwargs=True)
    yield
    handle.remove()
    assert not unmasked, f"the encoder was called with a position jump and no attention mask: {unmasked}"


def test_a_packed_reading_of_the_jump_would_move_the_denoising_vector(tiny_bert):
    """What the tests below tell apart: the split reading's [MASK] state is beyond their tolerance from the whole
    template's (6.6e-3 for this tiny random BERT, whose attention moves its states little; 40 STS-B points for
    bert-base, issue 80)."""
    tokenizer, model = tiny_bert
    full, split = full_and_split(model, Template(tokenizer), 9)
    assert (full - split).abs().max() > 100 * ATOL


def test_evaluation_denoises_with_the_whole_template_attended(tiny_bert, jump_calls_have_a_mask):
    tokenizer, model = tiny_bert
    template = Template(tokenizer)
    plain = Encoder(model, tokenizer, "prompt_mask", progress=False).encode(SENTENCES)
    denoised = Encoder(model, tokenizer, "prompt_mask_denoised", progress=False).encode(SENTENCES)
    for sentence, vector, vector_denoised in zip(SENTENCES, plain, denoised):
        full, split = full_and_split(model, template, len(tokenizer(sentence, add_special_tokens=False)["input_ids"]))
        np.testing.assert_allclose(vector - vector_denoised, full.numpy(), atol=ATOL)


def test_training_denoises_with_the_whole_template_attended(tiny_bert, jump_calls_have_a_mask):
    tokenizer, model = tiny_bert
    objective = PromptBERT(model, tokenizer, mlp=False).eval()
    lengths = torch.tensor([3, 9, 14])
    with torch.no_grad():
        states = objective.template_states(objective.template, lengths)
    for length, state in zip(lengths.tolist(), states):
        full, _ = full_and_split(model, objective.template, length)
        np.testing.assert_allclose(state.numpy(), full.numpy(), atol=ATOL)
