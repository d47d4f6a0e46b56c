"""JointBERT's contract: per-example losses (no batch reduction), mean-pooled X_enc, decoding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from robustnlu.data.collate import Collator, encode_utterances
from robustnlu.data.utterance import LabelVocab, Utterance
from robustnlu.model.encoders import build_encoder
from robustnlu.model.jointbert import JointBERT, JointBERTOutput, mean_pool
from robustnlu.robust.erm import ERM

UTTS = [
    Utterance("u0", ("play", "adele"), ("O", "B-artist"), "PlayMusic"),
    Utterance("u1", ("book", "a", "table", "in", "paris", "tonight"), ("O", "O", "O", "O", "B-city", "B-time"), "Book"),
    Utterance("u2", ("rate", "the", "current", "novel", "five"), ("O", "O", "B-obj", "I-obj", "B-rating"), "Rate"),
]


def make_batch(tokenizer, utts=UTTS):
    vocab = LabelVocab.from_utterances(utts)
    items = list(enumerate(encode_utterances(utts, tokenizer, vocab, max_length=64)))
    return vocab, Collator(tokenizer.pad_token_id)(items)


def make_model(tokenizer, tiny_encoder_cfg, vocab, crf=False):
    torch.manual_seed(0)
    enc = build_encoder(tiny_encoder_cfg, vocab_size=len(tokenizer))
    return JointBERT(enc, len(vocab.intents), len(vocab.tags), dropout=0.0, crf=crf).eval()


def test_per_example_losses_equal_independent_cross_entropy(tokenizer, tiny_encoder_cfg):
    vocab, batch = make_batch(tokenizer)
    model = make_model(tokenizer, tiny_encoder_cfg, vocab)
    out = model(batch)
    losses = model.task_losses(out, batch)
    assert losses.slot.shape == (3,) and losses.intent.shape == (3,)
    for i, u in enumerate(UTTS):
        n = len(u.tokens)
        gold_tags = torch.tensor(vocab.tag_ids(u.tags))
        expect_slot = F.cross_entropy(out.slot_logits[i, :n], gold_tags)  # mean over the words
        expect_intent = F.cross_entropy(out.intent_logits[i : i + 1], torch.tensor([vocab.intent_id(u.intent)]))
        torch.testing.assert_close(losses.slot[i], expect_slot)
        torch.testing.assert_close(losses.intent[i], expect_intent)
    # ERM: L = mean(l_slot) + γ mean(l_intent)
    torch.testing.assert_close(ERM(intent_loss_scale=0.5)(losses), losses.slot.mean() + 0.5 * losses.intent.mean())


def test_batch_composition_does_not_change_an_examples_loss(tokenizer, tiny_encoder_cfg):
    """Padding is masked: an example's loss alone equals its loss inside a padded batch."""
    vocab, batch = make_batch(tokenizer)
    model = make_model(tokenizer, tiny_encoder_cfg, vocab)
    together = model.task_losses(model(batch), batch)
    alone_items = list(enumerate(encode_utterances(UTTS[:1], tokenizer, vocab, max_length=64)))
    alone_batch = Collator(tokenizer.pad_token_id)(alone_items)
    alone = model.task_losses(model(alone_batch), alone_batch)
    torch.testing.assert_close(alone.slot[0], together.slot[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone.x_enc[0], together.x_enc[0], atol=1e-5, rtol=1e-5)


def test_x_enc_is_the_mean_of_unpadded_token_states(tokenizer, tiny_encoder_cfg):
    vocab, batch = make_batch(tokenizer)
    model = make_model(tokenizer, tiny_encoder_cfg, vocab)
    out = model(batch)
    hidden = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    for i in range(3):
        n = int(batch["attention_mask"][i].sum())
        torch.testing.assert_close(out.x_enc[i], hidden[i, :n].mean(0))


def test_crf_head_gives_per_example_losses_and_full_length_decodes(tokenizer, tiny_encoder_cfg):
    vocab, batch = make_batch(tokenizer)
    model = make_model(tokenizer, tiny_encoder_cfg, vocab, crf=True)
    out = model(batch)
    losses = model.task_losses(out, batch)
    assert losses.slot.shape == (3,) and torch.all(losses.slot > 0)
    # per-word scale: the CRF's sequence NLL divided by the number of words
    nll = model.crf.neg_log_likelihood(out.slot_logits, batch["slot_labels"], batch["word_mask"])
    torch.testing.assert_close(losses.slot, nll / batch["word_mask"].sum(1))
    intents, tags = model.decode(out, batch["word_mask"])
    assert [len(t) for t in tags] == [len(u.tokens) for u in UTTS]
    assert len(intents) == 3


def test_training_steps_reduce_the_loss(tokenizer, tiny_encoder_cfg):
    vocab, batch = make_batch(tokenizer)
    model = make_model(tokenizer, tiny_encoder_cfg, vocab).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    objective = ERM()
    first = None
    for _ in range(30):
        loss = objective(model.task_losses(model(batch), batch))
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


def reference_output(model, batch):
    """JointBERT's forward pass as the heads compute it, the encoder given the 2-D mask (transformers
    masks it itself: no mask at all for SDPA where every token is real)."""
    out = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    hidden = out.last_hidden_state
    words = hidden.gather(1, batch["word_index"].unsqueeze(-1).expand(-1, -1, hidden.size(-1)))
    return (model.intent_classifier(out.pooler_output), model.slot_classifier(words),
            mean_pool(hidden, batch["attention_mask"]))


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_outputs_and_gradients_are_those_of_the_encoders_own_masking(tokenizer, tiny_encoder_cfg, padded, bf16, train):
    """Bit for bit, in training (dropout drawn from the same seed) and evaluation, in float32 and
    under bf16 autocast, on a batch with padding and on one without (the all-ones mask)."""
    vocab, batch = make_batch(tokenizer, UTTS if padded else UTTS[1:2])
    assert bool(batch["attention_mask"].all()) is not padded
    torch.manual_seed(0)
    model = JointBERT(build_encoder({**tiny_encoder_cfg, "dropout": 0.1}, vocab_size=len(tokenizer)),
                      len(vocab.intents), len(vocab.tags), dropout=0.1).train(train)
    results = []
    for forward in (lambda: model(batch), lambda: reference_output(model, batch)):
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = forward()
        out = (out.intent_logits, out.slot_logits, out.x_enc) if isinstance(out, JointBERTOutput) else out
        model.zero_grad()
        sum(o.float().sum() for o in out).backward()
        results.append((out, [p.grad.clone() for p in model.encoder.parameters()]))
    (ours, our_grads), (ref, ref_grads) = results
    for a, b in zip(ours, ref, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(our_grads, ref_grads, strict=True))


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_the_forward_pass_reads_nothing_on_the_host(tokenizer, tiny_encoder_cfg, padded):
    """No host read (what a GPU would wait for, `bench.profile_step.HostSyncs`) in a forward pass
    and its backward pass, in training and in evaluation."""
    from bench.profile_step import HostSyncs

    vocab, batch = make_batch(tokenizer, UTTS if padded else UTTS[1:2])
    model = make_model(tokenizer, tiny_encoder_cfg, vocab)
    counter = HostSyncs(SimpleNamespace(on=True))
    with counter:
        model.train()
        model.task_losses(model(batch), batch).slot.sum().backward()
        model.eval()
        with torch.no_grad():
            model(batch)
    assert dict(counter.found) == {}
