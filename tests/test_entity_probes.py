"""lmstudy.entity.probes: span scorer and similarities on hand-made inputs, batched document states, mention
selection on a hand-made coreference document, and the BiLSTM probe learning a separable tagging task."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmstudy.data.readers.coref import CorefDocument, Mention
from lmstudy.entity.data import EntityDocument, encode_coref_document
from lmstudy.entity.probes import (
    BiLSTMTagger, NerProbeTask, TaggedSentence, document_states, entity_similarity, last_subtokens,
    mention_similarity, mention_vectors, predict_tags, similarity_rows, span_scores, tag_vocabulary,
)
from lmstudy.entity.model import GPT2E, GPT2EConfig


def _scores(gold, predicted) -> dict:
    return {row["type"]: row for row in span_scores(gold, predicted).to_dict("records")}


def test_span_scores_on_hand_made_iob():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "O", "B-ORG", "I-ORG"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"],  # PER right, LOC missed, a spurious ORG
                 ["B-PER", "I-PER", "B-ORG", "I-ORG"]]  # PER too long (wrong boundary), ORG right
    scores = _scores(gold, predicted)
    assert scores["PER"]["precision"] == 0.5 and scores["PER"]["recall"] == 0.5 and scores["PER"]["support"] == 2
    assert scores["LOC"]["recall"] == 0.0 and scores["LOC"]["support"] == 1
    assert scores["ORG"]["precision"] == 0.5 and scores["ORG"]["recall"] == 1.0
    overall = scores["overall"]  # 2 right of 4 predicted, of 4 gold
    assert overall["precision"] == 0.5 and overall["recall"] == 0.5 and overall["f1"] == 0.5
    assert overall["support"] == 4


def test_span_scores_conlleval_conventions_and_errors():
    # An I- without its B- opens a span (conlleval); a type change inside a span splits it.
    scores = _scores([["B-PER", "I-PER", "B-LOC"]], [["I-PER", "I-PER", "I-LOC"]])
    assert scores["overall"]["f1"] == 1.0
    scores = _scores([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]])
    assert scores["overall"]["precision"] == 0.0 and scores["overall"]["recall"] == 0.0
    assert _scores([["O", "O"]], [["O", "O"]])["overall"]["f1"] == 0.0  # nothing to find, nothing found
    with pytest.raises(ValueError, match="differ"):
        span_scores([["O"]], [["O", "O"]])


def test_similarities_on_hand_made_vectors():
    vectors = np.array([[1.0, 0], [2.0, 0],  # cluster a: identical directions -> 1
                        [1.0, 0], [0, 3.0], [-1.0, 0],  # cluster b: cosines 0, -1, 0 -> -1/3
                        [0, 1.0]])  # cluster c: a singleton, no pair
    clusters = ["a", "a", "b", "b", "b", "c"]
    assert mention_similarity(vectors, clusters) == pytest.approx((1 - 1 / 3) / 2)
    assert np.isnan(mention_similarity(vectors[5:], clusters[5:]))
    ones = np.ones_like(vectors)
    expected = np.mean([1, 1, 1, 1, -1, 1]) / np.sqrt(2)
    assert entity_similarity(vectors, ones) == pytest.approx(expected)


def test_similarity_rows_split_by_group():
    meta = pd.DataFrame({"doc_id": ["d"] * 4, "cluster": [1, 1, 2, 2], "group": ["NN*", "NN*", "PRP*", "PRP*"],
                         "text": ["x"] * 4})
    vectors = np.array([[1.0, 0], [1.0, 0], [1.0, 0], [0, 1.0]])
    rows = {(r["measure"], r["group"]): r for r in similarity_rows(meta, vectors, vectors, "GPT2")}
    assert rows[("mention similarity", "NN*")]["value"] == pytest.approx(1.0)
    assert rows[("mention similarity", "PRP*")]["value"] == pytest.approx(0.0)
    assert rows[("entity similarity", "PRP*")]["value"] == pytest.approx(1.0)  # the vectors themselves
    assert rows[("mention similarity", "NN*")]["mentions"] == 2


def _tiny_model(entity_layers=None) -> GPT2E:
    torch.manual_seed(0)
    config = GPT2EConfig(vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=2, entity_layers=entity_layers)
    model = GPT2E(config).eval()
    with torch.no_grad():  # a non-zero entity output, so entity states matter
        for block in model.transformer.h:
            if hasattr(block, "entity_attn"):
                block.entity_attn.c_proj.weight.normal_(0, 0.5)
    return model


def _random_docs(lengths, seed=0) -> list[EntityDocument]:
    generator = torch.Generator().manual_seed(seed)
    docs = []
    for index, n in enumerate(lengths):
        ids = torch.randint(1, 40, (n,), generator=generator).tolist()
        entities = torch.randint(0, 4, (n,), generator=generator).tolist()
        docs.append(EntityDocument(f"d{index}", [0, *ids[1:]], [0, *entities[1:]], [-1] * n))
    return docs


def test_document_states_batched_equal_one_at_a_time_and_read_the_memory():
    model = _tiny_model()
    docs = _random_docs([23, 9, 16])
    together = document_states(model, docs, seq_len=8, batch_size=3)
    for doc, (hidden, states) in zip(docs, together):
        alone_hidden, alone_states = document_states(model, [doc], seq_len=8, batch_size=1)[0]
        assert hidden.shape == (len(doc.input_ids), 16)
        assert torch.allclose(hidden, alone_hidden, atol=1e-5) and torch.allclose(states, alone_states, atol=1e-6)
        assert torch.all(states[:8] == 1)  # the first chunk reads a fresh memory: ones
        written = [t for t in range(8, len(doc.input_ids)) if doc.entity_ids[t] in doc.entity_ids[:8]
                   and doc.entity_ids[t] != 0]
        assert all(not torch.all(states[t] == 1) for t in written)  # later chunks read what was written
    # Without entity information (or without entity layers) every entity state is E_null.
    _, null_states = document_states(model, docs[:1], seq_len=8, use_entities=False)[0]
    assert torch.all(null_states == 1)
    _, gpt2_states = document_states(_tiny_model(entity_layers=[]), docs[:1], seq_len=8)[0]
    assert torch.all(gpt2_states == 1)


def test_last_subtokens():
    doc = EntityDocument("d", [0, 5, 6, 7, 8], [0] * 5, [-1, 0, 0, 1, 2])
    assert last_subtokens(doc, 3) == [2, 3, 4]
    with pytest.raises(ValueError, match="no sub-token"):
        last_subtokens(doc, 4)


def test_mention_vectors_keep_pos_groups_and_own_clusters():
    from lmstudy.tokenization import train_bpe

    tokenizer = train_bpe(["the sister of John saw him and she smiled at the dog"] * 20, 300)
    tokens = "the sister of John saw him and she smiled at the dog".split()
    pos = ["DET", "NOUN", "ADP", "PROPN", "VERB", "PRON", "CCONJ", "PRON", "VERB", "ADP", "DET", "NOUN"]
    mentions = [Mention(0, 4, 1),  # "the sister of John": last word John belongs to cluster 2 -> dropped
                Mention(3, 4, 2), Mention(5, 6, 2),  # John ... him
                Mention(7, 8, 1),  # she
                Mention(10, 12, 3)]  # the dog
    coref = CorefDocument("d", "test", tokens, [0], pos, mentions)
    encoded = encode_coref_document(coref, tokenizer)
    model = _tiny_model()
    model.resize_token_embeddings(len(tokenizer))
    meta, vectors, states = mention_vectors(model, [coref], [encoded], seq_len=8)
    assert list(meta["text"]) == ["John", "him", "she", "the dog"]
    assert list(meta["group"]) == ["NN*", "PRP*", "PRP*", "NN*"]
    assert vectors.shape == (4, 16) and states.shape == (4, 16)
    with pytest.raises(ValueError, match="no POS"):
        mention_vectors(model, [CorefDocument("d", "test", tokens, [0], None, mentions)], [encoded], seq_len=8)


def test_bilstm_probe_learns_a_separable_task(tmp_path, monkeypatch):
    from lmstudy.runs import get_run
    from lmstudy.training import TrainConfig, load_weights, train

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path))
    generator = torch.Generator().manual_seed(0)
    names = ["O", "B-PER", "I-PER", "B-LOC"]

    def sentence(n):  # the tag is written in the features: a probe must reach F1 = 1
        tags = [names[i] for i in torch.randint(0, 4, (n,), generator=generator).tolist()]
        tags = ["B-PER" if t == "I-PER" and (k == 0 or tags[k - 1] not in ("B-PER", "I-PER")) else t
                for k, t in enumerate(tags)]
        features = torch.nn.functional.one_hot(torch.tensor([names.index(t) for t in tags]), 8).float()
        return TaggedSentence(features + 0.05 * torch.randn(n, 8, generator=generator), tags)

    train_sentences = [sentence(int(n)) for n in torch.randint(3, 12, (120,), generator=generator)]
    valid_sentences = [sentence(int(n)) for n in torch.randint(3, 12, (30,), generator=generator)]
    tags = tag_vocabulary(train_sentences)
    assert tags[0] == "O" and set(tags) == set(names)
    task = NerProbeTask(train_sentences, valid_sentences, tags, batch_size=16)
    torch.manual_seed(0)
    tagger = BiLSTMTagger(8, 16, len(tags), dropout=0.0)
    run = get_run("test_probe", {"case": 1})
    epoch = task.steps_per_epoch()
    metrics = train(tagger, task, TrainConfig(max_steps=30 * epoch, lr=0.02, eval_every=epoch * 10), run)
    assert metrics["best_val_f1"] > 0.95
    load_weights(tagger, run, "best")
    predicted = predict_tags(tagger, valid_sentences, tags)
    assert [len(p) for p in predicted] == [len(s.tags) for s in valid_sentences]
    assert span_scores([s.tags for s in valid_sentences], predicted).iloc[-1]["f1"] > 0.95
