"""GPT2E (Entity-Transformer GPT-2) and its entity data: exactness against GPT-2, causality, memory rules,
the ablation options (learned initial state, per-mention memory), FLOP count, save/load, and a few training
steps on real GUM slices."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.data.readers.coref import CorefDocument, Mention
from lmstudy.entity.data import (
    IGNORE_INDEX,
    EntityDocument,
    EntityLMTask,
    document_chunks,
    encode_coref_document,
    entity_stream_loss,
    load_entity_documents,
    stream_batches,
)
from lmstudy.entity.model import (
    GPT2E, EntityMemory, EntityTransformerBlock, GPT2EConfig, training_flops_per_token, update_memory,
)
from lmstudy.training import TrainTask
from tests.conftest import require_corpus

TINY = dict(vocab_size=97, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=96, eos_token_id=96)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from more threads, and on a shared busy machine lose a lot to them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_gpt2e(seed: int = 0, **overrides) -> GPT2E:
    torch.manual_seed(seed)
    return GPT2E(GPT2EConfig(**{**TINY, **overrides})).eval()


def random_memory(B: int, S: int, C: int, seed: int = 1) -> EntityMemory:
    """Every entity slot written with a random state; slot 0 (E_null) unwritten."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(B, S, C, generator=generator)
    states[:, 0] = 1.0
    written = torch.ones(B, S, dtype=torch.bool)
    written[:, 0] = False
    return EntityMemory(states, written)


# --------------------------------------------------------------------------------------------------
# exactness against GPT-2


def test_without_entity_layers_gpt2e_is_gpt2():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(**TINY)).eval()
    baseline = GPT2E(GPT2EConfig(entity_layers=[], **TINY)).eval()
    baseline.load_state_dict(gpt2.state_dict())
    assert not baseline.has_entity_layers
    assert sum(p.numel() for p in baseline.parameters()) == sum(p.numel() for p in gpt2.parameters())
    x = torch.randint(0, 97, (2, 12))
    out = baseline(x, entity_ids=torch.randint(0, 5, (2, 12)))
    assert torch.equal(out.logits, gpt2(x).logits)
    assert out.entity_memory is None


def test_zero_entity_output_gives_exactly_gpt2_logits_with_any_entities():
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(**TINY)).eval()
    model = GPT2E.from_gpt2(gpt2).eval()
    assert all(isinstance(block, EntityTransformerBlock) for block in model.transformer.h)
    x, e = torch.randint(0, 97, (2, 12)), torch.randint(0, 5, (2, 12))
    out = model(x, entity_ids=e, entity_memory=random_memory(2, 5, 32))
    assert torch.equal(out.logits, gpt2(x).logits)
    # ... and the entity layer is live once its projection is not zero
    torch.nn.init.normal_(model.transformer.h[0].entity_attn.c_proj.weight, std=0.1)
    assert not torch.allclose(model(x, entity_ids=e).logits, gpt2(x).logits)


def test_entities_change_the_logits_of_a_randomly_initialised_gpt2e():
    model = tiny_gpt2e()
    x = torch.randint(0, 97, (1, 10))
    e = torch.tensor([[0, 1, 1, 0, 2, 0, 1, 0, 0, 2]])
    memory = random_memory(1, 3, 32)
    plain = model(x, entity_ids=torch.zeros_like(e), entity_memory=memory).logits
    with_entities = model(x, entity_ids=e, entity_memory=memory).logits
    assert torch.equal(plain[:, 0], with_entities[:, 0])  # position 0 is null in both
    assert not torch.allclose(plain[:, 1:], with_entities[:, 1:])


def test_with_null_entities_everywhere_the_memory_is_irrelevant_and_stream_loss_works():
    """LAMBADA (entity ∅ everywhere): E is E_null whatever the memory holds, and GPT2E plugs into the shared
    evaluation protocol (lmstudy.evaluation.stream_loss) like any causal LM."""
    from lmstudy.evaluation import stream_loss

    model = tiny_gpt2e()
    x = torch.randint(0, 97, (2, 12))
    fresh = model(x).logits
    assert torch.equal(fresh, model(x, entity_ids=torch.zeros_like(x), entity_memory=random_memory(2, 9, 32)).logits)
    doc = EntityDocument("lambada-0", [96, *x[0].tolist(), *x[1].tolist()], [0] * 25, [-1] * 25)
    chunked = entity_stream_loss(model, [doc], seq_len=8, batch_size=1, pad_id=96)
    assert chunked == pytest.approx(stream_loss(model, torch.tensor(doc.input_ids), 8, 1), rel=1e-6)


# --------------------------------------------------------------------------------------------------
# causality


@pytest.mark.parametrize("memory_update", ["chunk", "mention"])
@pytest.mark.parametrize("t", [1, 5, 11])
def test_changing_tokens_or_entities_at_or_after_t_leaves_earlier_logits_unchanged(t, memory_update):
    model = live_entity_model(memory_update=memory_update)
    T = 12
    x, e = torch.randint(0, 97, (2, T)), torch.randint(0, 6, (2, T))
    memory = random_memory(2, 8, 32)
    reference = model(x, entity_ids=e, entity_memory=memory).logits
    x2, e2 = x.clone(), e.clone()
    x2[:, t:] = torch.randint(0, 97, (2, T - t))
    e2[:, t:] = torch.randint(0, 8, (2, T - t))  # also ids the earlier positions use
    changed = model(x2, entity_ids=e2, entity_memory=memory).logits
    assert torch.allclose(reference[:, :t], changed[:, :t], atol=1e-6, rtol=0)
    assert not torch.allclose(reference[:, t:], changed[:, t:])


def test_a_mention_earlier_in_the_chunk_does_not_feed_later_positions_of_the_same_chunk():
    """Within one pass the entity states come from the memory only: the hidden states of the chunk's own
    mentions must not reach E. With a fresh memory (all ones) a mention at 0..2 therefore changes later
    logits only through the ordinary attention paths, exactly as when the ids are given but unchanged
    memory is read: the result equals a run where those positions' entity id is a never-seen entity."""
    model = tiny_gpt2e()
    x = torch.randint(0, 97, (1, 10))
    e = torch.tensor([[1, 1, 1, 0, 0, 1, 0, 0, 0, 0]])
    e_other = torch.tensor([[2, 2, 2, 0, 0, 1, 0, 0, 0, 0]])  # the early mention is another (fresh) entity
    a = model(x, entity_ids=e).logits
    b = model(x, entity_ids=e_other).logits
    assert torch.allclose(a, b, atol=1e-6, rtol=0)  # all entities read ones, wherever they were seen


def test_logits_of_a_later_chunk_depend_on_the_earlier_chunk_only_through_the_memory():
    model = tiny_gpt2e()
    x1, x2 = torch.randint(0, 97, (1, 8)), torch.randint(0, 97, (1, 8))
    e1, e2 = torch.tensor([[0, 1, 1, 0, 2, 0, 0, 0]]), torch.tensor([[1, 0, 0, 2, 0, 3, 0, 0]])
    memory = model(x1, entity_ids=e1).entity_memory
    assert memory.states.shape == (1, 3, 32) and memory.written.tolist() == [[False, True, True]]
    second = model(x2, entity_ids=e2, entity_memory=memory).logits
    fresh = model(x2, entity_ids=e2).logits
    assert not torch.allclose(second, fresh)  # the memory carries information across chunks
    x1_changed = x1.clone()
    x1_changed[0, 0] = (x1[0, 0] + 1) % 97
    other = model(x1_changed, entity_ids=e1).entity_memory
    assert not torch.allclose(model(x2, entity_ids=e2, entity_memory=other).logits, second)


# --------------------------------------------------------------------------------------------------
# entity memory


def test_memory_starts_at_ones_and_is_updated_only_from_mentions():
    model = tiny_gpt2e()
    x = torch.randint(0, 97, (2, 9))
    e = torch.tensor([[0, 3, 3, 0, 1, 0, 3, 0, 0],
                      [0, 0, 0, 0, 0, 0, 0, 0, 0]])
    out = model(x, entity_ids=e)
    memory, hidden = out.entity_memory, out.last_hidden_state
    assert memory.states.shape == (2, 4, 32) and not memory.states.requires_grad
    assert torch.equal(out.entity_states, torch.ones(2, 9, 32))  # a fresh memory reads ones everywhere
    assert memory.written.tolist() == [[False, True, False, True], [False] * 4]  # E_null is never written
    assert torch.equal(memory.states[0, 3], hidden[0, 6])  # last sub-token of entity 3's last mention
    assert torch.equal(memory.states[0, 1], hidden[0, 4])
    # the next chunk reads what was written, and ones for entity 2 (not seen yet) and for E_null
    after = model(x, entity_ids=e, entity_memory=memory).entity_states
    assert torch.equal(after[0, 1], hidden[0, 6]) and torch.equal(after[0, 4], hidden[0, 4])
    assert torch.equal(after[0, 0], torch.ones(32)) and torch.equal(after[1], torch.ones(9, 32))


def test_update_memory_keeps_absent_entities_and_the_null_slot():
    memory = random_memory(1, 4, 3)
    memory.written[0, 3] = False
    ids = torch.tensor([[2, 0, 2]])
    hidden = torch.arange(9.0).view(1, 3, 3)
    new = update_memory(memory, ids, hidden)
    assert torch.equal(new.states[0, 2], hidden[0, 2])
    for slot in (0, 1, 3):
        assert torch.equal(new.states[0, slot], memory.states[0, slot])
    assert new.written.tolist() == [[False, True, True, False]]


def test_memory_is_reset_for_a_new_document_grows_for_new_ids_and_rows_stay_separate():
    model = tiny_gpt2e()
    x = torch.randint(0, 97, (2, 6))
    e = torch.tensor([[0, 1, 1, 0, 2, 0], [1, 0, 0, 0, 0, 0]])
    memory = random_memory(2, 3, 32, seed=3)
    continued = model(x, entity_ids=e, entity_memory=memory, new_document=torch.tensor([False, True]))
    restart = model(x, entity_ids=e, new_document=torch.tensor([True, True]))
    carried = model(x, entity_ids=e, entity_memory=memory)
    # row 1 starts a new document: identical to a fresh memory, whatever was carried
    assert torch.allclose(continued.logits[1], restart.logits[1], atol=1e-6, rtol=0)
    # row 0 continues its document: identical to carrying, different from starting afresh
    assert torch.allclose(continued.logits[0], carried.logits[0], atol=1e-6, rtol=0)
    assert not torch.allclose(continued.logits[0], restart.logits[0])
    grown = model(x, entity_ids=e.clamp(max=0) + torch.tensor([[0, 0, 0, 0, 0, 5]] * 2), entity_memory=memory)
    assert grown.entity_memory.states.shape == (2, 6, 32)
    assert not grown.entity_memory.written[:, 3:5].any() and grown.entity_memory.written[:, 5].all()


def make_doc(doc_id: str, n: int, entity_every: int = 3) -> EntityDocument:
    ids = [96] + [(7 * i + len(doc_id)) % 90 for i in range(n - 1)]
    entities = [0] + [1 + (i // entity_every) % 3 if i % entity_every == 0 else 0 for i in range(n - 1)]
    return EntityDocument(doc_id, ids, entities, [-1] * n)


def test_batches_carry_rows_across_chunks_and_reset_at_each_document():
    docs = [make_doc("a", 21), make_doc("bb", 9), make_doc("ccc", 12)]
    batches = list(stream_batches(docs, batch_size=2, seq_len=5, pad_id=96))
    # a: 20 targets -> 4 chunks in row 0; bb (2 chunks) then ccc (3 chunks) in row 1
    assert len(batches) == 5
    assert [b.new_document.tolist() for b in batches] == [[True, True], [False, False], [False, True],
                                                          [False, False], [True, False]]
    row0 = torch.cat([b.input_ids[0] for b in batches[:4]]).tolist()
    assert row0 == docs[0].input_ids[:20]
    targets = torch.cat([b.targets[0] for b in batches[:4]]).tolist()
    assert targets == docs[0].input_ids[1:21]
    assert (batches[4].targets[0] == IGNORE_INDEX).all()  # row 0 ran out: an all-pad chunk
    assert batches[1].targets[1].tolist() == docs[1].input_ids[6:9] + [IGNORE_INDEX] * 2
    n_targets = sum(int((b.targets != IGNORE_INDEX).sum()) for b in batches)
    assert n_targets == sum(len(d.input_ids) - 1 for d in docs)
    assert sum(len(document_chunks(d, 5)) for d in docs) == 9


def live_entity_model(**options) -> GPT2E:
    """A tiny GPT2E whose entity attention visibly depends on the keys: at GPT-2's init (std 0.02) the
    scores are ~0, the attention is uniform whatever the entity states, and the memory barely matters.
    ``options``: entity options of GPT2EConfig; the weights are the same whatever they are."""
    model = tiny_gpt2e(**options)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for block in model.transformer.h:
            if not isinstance(block, EntityTransformerBlock):
                continue
            for layer in (block.entity_attn.qv_attn, block.entity_attn.k_attn, block.entity_attn.c_proj):
                layer.weight.copy_(0.2 * torch.randn(layer.weight.shape, generator=generator))
    return model


def memory_by_hand(memory: EntityMemory | None, entity_ids: list[int], hidden: torch.Tensor) -> EntityMemory:
    """The module docstring's update rule written out for one row: grow (unwritten) to the largest id, then
    every entity of the chunk takes the hidden state at its last position; slot 0 and absent slots stay."""
    n_slots = max(max(entity_ids) + 1, 1 if memory is None else memory.states.size(1))
    states, written = torch.ones(1, n_slots, hidden.size(-1)), torch.zeros(1, n_slots, dtype=torch.bool)
    if memory is not None:
        states[:, : memory.states.size(1)] = memory.states
        written[:, : memory.written.size(1)] = memory.written
    for t, entity in enumerate(entity_ids):
        if entity != 0:
            states[0, entity], written[0, entity] = hidden[0, t], True
    return EntityMemory(states, written)


def loss_by_hand(model: GPT2E, doc: EntityDocument, seq_len: int, carry: bool) -> float:
    """Mean loss of ``doc`` read chunk by chunk, each chunk reading the memory written by hand from the
    previous chunk's hidden states (``carry``) or a fresh memory of ones (not ``carry``)."""
    memory, total, count = None, 0.0, 0
    with torch.no_grad():
        for batch in stream_batches([doc], 1, seq_len, pad_id=96):
            out = model(batch.input_ids, entity_ids=batch.entity_ids, entity_memory=memory if carry else None)
            total += F.cross_entropy(out.logits[0], batch.targets[0], ignore_index=IGNORE_INDEX,
                                     reduction="sum").item()
            count += int((batch.targets != IGNORE_INDEX).sum())
            memory = memory_by_hand(memory, batch.entity_ids[0].tolist(), out.last_hidden_state)
    return total / count


def test_memory_is_carried_within_a_document_and_never_crosses_documents_in_evaluation():
    """Within a document the loss is that of a memory written, chunk by chunk, as the docstring says (each
    entity takes the final hidden state of its last sub-token), which clearly differs from reading a fresh
    memory in every chunk (a no-op update); across documents the loss of a document does not depend on
    which document its row read before."""
    model = live_entity_model()
    a, b, c = make_doc("a", 17), make_doc("b", 23, entity_every=2), make_doc("c", 19)
    alone = entity_stream_loss(model, [b], seq_len=6, batch_size=1, pad_id=96)
    carried, fresh = loss_by_hand(model, b, 6, carry=True), loss_by_hand(model, b, 6, carry=False)
    assert abs(carried - fresh) > 5e-4  # the memory matters at this size: the check below has teeth
    assert alone == pytest.approx(carried, rel=1e-6), \
        f"chunked loss {alone:.6f} is not that of the docstring's memory ({carried:.6f}; fresh memory: {fresh:.6f})"
    after_a = entity_stream_loss(model, [a, b], seq_len=6, batch_size=1, pad_id=96)
    after_c = entity_stream_loss(model, [c, b], seq_len=6, batch_size=1, pad_id=96)
    loss_a = entity_stream_loss(model, [a], seq_len=6, batch_size=1, pad_id=96)
    loss_c = entity_stream_loss(model, [c], seq_len=6, batch_size=1, pad_id=96)
    n_a, n_b, n_c = 16, 22, 18
    assert after_a == pytest.approx((loss_a * n_a + alone * n_b) / (n_a + n_b), rel=1e-6)
    assert after_c == pytest.approx((loss_c * n_c + alone * n_b) / (n_c + n_b), rel=1e-6)
    # and GPT2E with memory is not the baseline without entity layers
    baseline = GPT2E(GPT2EConfig(entity_layers=[], **TINY)).eval()
    baseline.load_state_dict(model.state_dict(), strict=False)
    assert entity_stream_loss(baseline, [b], 6, 1, 96) != pytest.approx(alone, rel=1e-6)


# --------------------------------------------------------------------------------------------------
# ablation options: a learned initial entity state, the memory written after each mention


def test_learned_initial_state_starts_as_ones_is_read_only_where_nothing_is_written_and_learns():
    paper = live_entity_model()
    learned = live_entity_model(entity_init="learned")
    assert torch.equal(learned.initial_entity, torch.ones(32)) and not hasattr(paper, "initial_entity")
    x, e = torch.randint(0, 97, (2, 10)), torch.randint(0, 4, (2, 10))
    assert torch.equal(learned(x, entity_ids=e).logits, paper(x, entity_ids=e).logits)  # same model at the start
    # It is what E_null and unwritten slots read, and nothing else. (With nothing written every key is the
    # same, the attention is uniform and the initial state cannot matter: entity 3 here is written.)
    with torch.no_grad():
        learned.initial_entity.copy_(torch.randn(32))
    memory = random_memory(2, 4, 32)
    memory.written[:, 1:3] = False
    out = learned(x, entity_ids=e, entity_memory=memory)
    unwritten = e < 3
    assert torch.equal(out.entity_states[unwritten], learned.initial_entity.expand(int(unwritten.sum()), 32))
    assert not torch.allclose(out.logits, paper(x, entity_ids=e, entity_memory=memory).logits)
    every_slot = random_memory(2, 4, 32)
    mentions_only = e.clamp(min=1)  # every token in a mention of a written entity: the initial state is unread
    assert torch.equal(learned(x, entity_ids=mentions_only, entity_memory=every_slot).logits,
                       paper(x, entity_ids=mentions_only, entity_memory=every_slot).logits)
    # It is a parameter the loss trains.
    F.cross_entropy(out.logits.reshape(-1, 97), torch.randint(0, 97, (20,))).backward()
    assert learned.initial_entity.grad is not None and learned.initial_entity.grad.abs().sum() > 0


def mention_states_by_hand(entity_ids: list[int], hidden: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """The per-mention rule for one row, as a loop: at t, the state at the end of the latest mention (run of
    the same id) of t's entity that ends before t, else ``fallback[t]``."""
    T = len(entity_ids)
    expected = fallback.clone()
    for t, entity in enumerate(entity_ids):
        if entity == 0:
            continue
        ends = [p for p in range(t) if entity_ids[p] == entity and (p + 1 == T or entity_ids[p + 1] != entity)]
        if ends:
            expected[t] = hidden[ends[-1]]
    return expected


def test_per_mention_memory_reads_mentions_that_ended_earlier_in_the_chunk():
    """Pass 1 of the per-mention model is the chunk model (same weights); each position then reads the first
    pass's state at the end of its entity's latest *finished* mention, else the memory."""
    chunk, mention = live_entity_model(), live_entity_model(memory_update="mention")
    ids = [0, 1, 1, 0, 2, 0, 1, 1, 0, 2, 1, 3]
    x, e = torch.randint(0, 97, (1, len(ids))), torch.tensor([ids])
    memory = random_memory(1, 3, 32)  # entities 1, 2 written by an earlier chunk; 3 is new (grown, unwritten)
    first = chunk(x, entity_ids=e, entity_memory=memory)
    out = mention(x, entity_ids=e, entity_memory=memory)
    expected = mention_states_by_hand(ids, first.last_hidden_state[0], first.entity_states[0])
    assert torch.equal(out.entity_states[0], expected)
    # the second mention of entity 1 (positions 6, 7) reads the first one's end (2), both its tokens alike:
    # the mention it is in has not ended; position 10 reads the end of the second one (7)
    for t, p in ((6, 2), (7, 2), (9, 4), (10, 7)):
        assert torch.equal(out.entity_states[0, t], first.last_hidden_state[0, p])
    for t in (1, 2, 4):  # first mentions in the chunk read the memory
        assert torch.equal(out.entity_states[0, t], memory.states[0, ids[t]])
    assert torch.equal(out.entity_states[0, 11], torch.ones(32))  # entity 3: new, unwritten
    assert torch.equal(out.logits[:, :6], first.logits[:, :6])  # no second mention yet: the same logits
    assert not torch.allclose(out.logits[:, 6:], first.logits[:, 6:])
    # the memory written at the end is the second pass's, by the same rule as the chunk model's
    assert torch.equal(out.entity_memory.states, memory_by_hand(memory, ids, out.last_hidden_state).states)


def test_per_mention_pass_one_gives_no_gradient_and_the_memory_is_detached():
    model = live_entity_model(memory_update="mention").train()
    x, e = torch.randint(0, 97, (2, 12)), torch.tensor([[0, 1, 1, 0, 1, 0, 2, 2, 0, 2, 0, 1]] * 2)
    out = model(x, entity_ids=e)
    assert not out.entity_memory.states.requires_grad and not out.entity_states.requires_grad
    out.logits.sum().backward()  # one backward through pass 2 only
    assert model.transformer.h[0].entity_attn.k_attn.weight.grad is not None


def test_training_flops_per_token_by_hand():
    from lmstudy.base import BaseModelConfig, flops_per_token

    d, L, T, V = 32, 2, 64, 97
    gpt2 = GPT2EConfig(entity_layers=[], **TINY)
    assert training_flops_per_token(gpt2, T) == flops_per_token(BaseModelConfig(L, 4, d, T), V)
    assert training_flops_per_token(GPT2Config(**TINY), T) == training_flops_per_token(gpt2, T)
    blocks = L * (12 * d * d + 13 * d) + 2 * d  # non-embedding parameters of GPT-2
    gpt2_flops = 6 * (blocks + d * V) + 12 * L * d * T
    entity = 4 * d * d + 6 * d  # ln_e 2d, qv 2d^2 + 2d, k d^2 + d, proj d^2 + d
    assert sum(p.numel() for p in tiny_gpt2e().transformer.h[0].entity_attn.parameters()) == entity
    gpt2e_flops = gpt2_flops + L * (6 * entity + 12 * d * T)
    assert training_flops_per_token(GPT2EConfig(**TINY), T) == gpt2e_flops
    assert training_flops_per_token(GPT2EConfig(entity_layers=[1], **TINY), T) == gpt2_flops + 6 * entity + 12 * d * T
    mention = gpt2e_flops + 2 * (blocks + L * entity) + 4 * (2 * L) * d * T  # + a forward pass of the blocks
    assert training_flops_per_token(GPT2EConfig(memory_update="mention", **TINY), T) == mention


def test_entity_options_are_checked():
    with pytest.raises(ValueError, match="entity_init"):
        GPT2EConfig(entity_init="zeros", **TINY)
    with pytest.raises(ValueError, match="memory_update"):
        GPT2EConfig(memory_update="token", **TINY)


# --------------------------------------------------------------------------------------------------
# data


class CharTokenizer:
    """A stand-in for a HF fast tokenizer: one id per character, offsets included."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        out = {"input_ids": [1 + ord(ch) % 90 for ch in text]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(i, i + 1) for i in range(len(text))]
        return out


def test_coref_document_entity_ids_follow_the_innermost_mention():
    doc = CorefDocument("d", "train", ["Her", "sister", "saw", "her"], [0], None,
                        [Mention(0, 2, 40), Mention(0, 1, 7), Mention(3, 4, 7)])
    encoded = encode_coref_document(doc, CharTokenizer())
    # ids in order of first appearance: "Her" is cluster 7 -> 1 (innermost), "sister" cluster 40 -> 2
    assert encoded.input_ids[0] == 0 and encoded.entity_ids[0] == 0
    assert encoded.entity_ids[1:] == [1, 1, 1, 0, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 1, 1, 1]
    assert encoded.word_index[1:5] == [0, 0, 0, -1]


def test_gum_documents_get_gpt2_subtokens_and_entity_ids():
    require_corpus("gum")
    require_corpus("gpt2_bpe")
    from lmstudy.tokenization import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    docs = load_entity_documents("gum", "dev", tokenizer, limit=2)
    from lmstudy.data.readers.gum import read_gum_coref
    from lmstudy.data.catalogue import corpus_path

    raw = next(read_gum_coref(corpus_path("gum"), split="dev"))
    doc = docs[0]
    assert doc.doc_id == raw.doc_id and doc.input_ids[0] == tokenizer.eos_token_id
    assert tokenizer.decode(doc.input_ids[1:]) == " ".join(raw.tokens)
    clusters = raw.token_clusters("innermost")
    for entity, word in zip(doc.entity_ids[1:], doc.word_index[1:]):
        assert (entity == 0) == (word < 0 or clusters[word] is None)
    assert doc.n_entities == len({c for c in clusters if c is not None})
    lambada = load_entity_documents("lambada", "test", tokenizer, limit=2)
    assert len(lambada) == 2 and all(set(d.entity_ids) == {0} for d in lambada)


# --------------------------------------------------------------------------------------------------
# save / load and training


@pytest.mark.parametrize("options", [dict(entity_layers=[1]),
                                     dict(entity_init="learned", memory_update="mention")])
def test_save_pretrained_round_trip_reproduces_the_logits(tmp_path, options):
    model = live_entity_model(**options)
    if hasattr(model, "initial_entity"):
        with torch.no_grad():
            model.initial_entity.copy_(torch.randn(32))  # a trained value, not the ones it starts at
    x, e = torch.randint(0, 97, (1, 10)), torch.tensor([[0, 1, 1, 0, 2, 0, 1, 0, 3, 3]])
    memory = random_memory(1, 3, 32)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    config = GPT2EConfig.from_pretrained(tmp_path)
    assert config.model_type == "gpt2e" and {k: getattr(config, k) for k in options} == options
    loaded = GPT2E.from_pretrained(tmp_path).eval()
    assert isinstance(loaded.config, GPT2EConfig)
    if hasattr(model, "initial_entity"):
        assert torch.equal(loaded.initial_entity, model.initial_entity)  # loaded, not re-initialised to ones
    assert [isinstance(b, EntityTransformerBlock) for b in loaded.transformer.h] == \
        [isinstance(b, EntityTransformerBlock) for b in model.transformer.h]
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()
    assert torch.equal(loaded(x, entity_ids=e, entity_memory=memory).logits,
                       model(x, entity_ids=e, entity_memory=memory).logits)


def test_a_tiny_gpt2e_trains_on_gum_slices_with_the_shared_loop(tmp_path, monkeypatch):
    require_corpus("gum")
    require_corpus("gpt2_bpe")
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    from lmstudy.runs import get_run, read_log
    from lmstudy.tokenization import gpt2_tokenizer
    from lmstudy.training import TrainConfig, train

    torch.manual_seed(0)
    tokenizer = gpt2_tokenizer()
    train_docs = load_entity_documents("gum", "train", tokenizer, limit=2)
    valid_docs = load_entity_documents("gum", "dev", tokenizer, limit=1)
    model = GPT2E(GPT2EConfig(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2))
    task = EntityLMTask(train_docs, valid_docs, batch_size=2, seq_len=64, pad_id=tokenizer.eos_token_id)
    config = TrainConfig(max_steps=12, lr=1e-2, log_every=1, seed=0)
    initial = task.evaluate(model)["val_loss"]
    assert initial == pytest.approx(math.log(len(tokenizer)), abs=0.05)  # untrained: a uniform guess
    metrics = train(model, task, config, get_run("gpt2e-test", {"train": config}))
    losses = [r["loss"] for r in read_log(get_run("gpt2e-test", {"train": config})).to_dict("records")
              if r["kind"] == "train"]
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 1.0
    # Learning, not noise: 12 steps take validation ~3 nats below the uniform 10.82 (7.85 when written).
    assert metrics["val_loss"] < initial - 2.0, f"val_loss {metrics['val_loss']:.3f}, initially {initial:.3f}"


class CrashAt(TrainTask):
    """``task`` that raises KeyboardInterrupt at the ``call``-th loss (a killed process)."""

    stateful = True

    def __init__(self, task: EntityLMTask, call: int):
        self.task, self.call, self.calls = task, call, 0

    def batches(self, epoch):
        return self.task.batches(epoch)

    def loss(self, model, batch, carry):
        self.calls += 1
        if self.calls == self.call:
            raise KeyboardInterrupt
        return self.task.loss(model, batch, carry)

    def evaluate(self, model):
        return self.task.evaluate(model)


def test_training_resumes_exactly_with_the_entity_memory_carried_through_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    from lmstudy.runs import get_run
    from lmstudy.training import TrainConfig, latest_checkpoint, train

    docs = [make_doc("a", 31), make_doc("bb", 19, entity_every=2), make_doc("ccc", 24)]
    config = TrainConfig(max_steps=9, lr=3e-3, checkpoint_every=4, log_every=1, seed=0)

    def fit(study, wrap=lambda task: task):
        task = EntityLMTask(docs, docs[:1], batch_size=2, seq_len=5, pad_id=96)
        return train(tiny_gpt2e(seed=0).train(), wrap(task), config, get_run(study, {"train": config}))

    reference = fit("reference")
    with pytest.raises(KeyboardInterrupt):
        fit("resumed", lambda task: CrashAt(task, call=7))  # after the step-4 checkpoint, mid-document
    assert latest_checkpoint(get_run("resumed", {"train": config})).name == "step-000000004"
    resumed = fit("resumed")
    assert resumed["val_loss"] == pytest.approx(reference["val_loss"], rel=1e-6)
