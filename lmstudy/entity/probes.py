"""Probes of GPT2 / GPT2E representations (Stylianou & Vlahavas 2020, Tables 4-5 and the appendix figure).

Everything here reads *frozen* models: the final hidden state (after ``ln_f``, what the LM head and the
entity memory read) of a document run through the model chunk after chunk, the entity memory carried.

Representations
---------------
- :func:`document_states`: per input position of one encoded document (its ``<|endoftext|>`` included), the
  hidden state (n, C) and the entity state ``E`` the entity attention read there (n, C): the memory slot of
  the token's entity (or, in the per-mention variant, the state of an earlier mention in the chunk), or
  ``E_null`` (the initial state, ones in the paper) outside mentions, for GPT2E without entity information;
  ones for GPT2 (which has no memory; the ones vector is what the paper's rule gives).
- A *word*'s vector is the hidden state at its last sub-token (the causal model has read the whole word
  there). A *mention*'s vector is the vector of its last word: in a causal model the only position that has
  read the whole mention, and mostly the head of an English noun phrase.

Table 4 (mention similarity), our reading
-----------------------------------------
The paper groups mentions by part of speech, "NN, NNS, NNP, NNPS" and "PRP, PRP$". GUM carries Universal
POS, so the groups are ``NN*`` = the mention's last word is NOUN or PROPN and ``PRP*`` = it is PRON (UPOS
PRON also holds demonstrative, interrogative and indefinite pronouns that PTB tags otherwise). A mention is
kept only when its last word's innermost cluster is its own (in "[the sister of [John]]" the outer
mention's last word belongs to John), so that the entity state read there is the mention's entity.

- *mention similarity*: per entity (cluster of one document) with at least two mentions of the group, the
  mean cosine similarity over pairs of its mentions of that group; averaged over entities.
- *entity similarity*: mean over mentions of the cosine between the mention vector and the entity state
  ``E`` the model read at that position. Only this reading explains the paper's numbers: GPT2 has no entity
  representation of its own yet gets -0.016, which is what the ones vector ``E_null`` gives (the cosine of a
  hidden state with ones); GPT2E with entity information reads the memory (mostly still ones at an entity's
  first mention of a chunk), hence the small difference between its two columns.

Settings: GPT2; GPT2E with entity information at inference (gold entity ids); GPT2E without (all ids null).

NER probe (Table 5)
-------------------
A BiLSTM tagger (Lample et al. 2016 without character embeddings and without the CRF: a softmax per word)
over the frozen word vectors (standardised per dimension with the training words' mean and std), one
sentence a sequence, trained with the shared loop
(:class:`NerProbeTask`), the same settings for every model. Labels: IOB of the corpus' outermost typed
entity layer (:meth:`CorefDocument.entity_iob`). :func:`span_scores` is a conlleval-style span scorer (a
span counts when type and both boundaries match; an ``I-X`` without ``B-X`` opens a span), micro-averaged
overall and per type.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from lmstudy.data.readers.coref import CorefDocument, iob_spans
from lmstudy.entity.data import IGNORE_INDEX, NULL_ENTITY, EntityDocument
from lmstudy.training import TrainTask

POS_GROUPS = {"NN*": ("NOUN", "PROPN"), "PRP*": ("PRON",)}  # UPOS standing in for the paper's PTB tags


# ---------------------------------------------------------------------------------------------------
# representations


@torch.no_grad()
def document_states(model, docs: list[EntityDocument], seq_len: int, use_entities: bool = True,
                    batch_size: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per document: hidden states (n, C) and entity states read (n, C) at every input position.

    Each document is read in consecutive chunks of ``seq_len`` with the entity memory carried, as in training
    and :func:`lmstudy.entity.data.entity_stream_loss`; unlike those, the last token is an input too.
    ``batch_size`` documents are read side by side, one per row, right-padded (padding comes after every real
    position, so a causal model's states there do not change; its entity id is null, so it writes no memory).
    """
    model.eval()
    device = next(model.parameters()).device
    results = []
    for first_doc in range(0, len(docs), batch_size):
        group = docs[first_doc:first_doc + batch_size]
        n = max(len(doc.input_ids) for doc in group)
        ids = torch.tensor([_pad(doc.input_ids, n, doc.input_ids[0]) for doc in group], device=device)  # (B, N)
        entity_ids = torch.tensor([_pad(doc.entity_ids if use_entities else [], n, NULL_ENTITY) for doc in group],
                                  device=device)  # (B, N)
        hidden, entity_states, memory = [], [], None
        for start in range(0, n, seq_len):
            x, e = ids[:, start:start + seq_len], entity_ids[:, start:start + seq_len]  # (B, T)
            first = torch.full((len(group),), start == 0, device=device)
            out = model(x, entity_ids=e, entity_memory=memory, new_document=first)
            memory = out.entity_memory
            hidden.append(out.last_hidden_state)  # (B, T, C)
            if out.entity_states is not None:
                entity_states.append(out.entity_states)  # (B, T, C): the E the entity attention read
        hidden = torch.cat(hidden, dim=1).float().cpu()  # (B, N, C)
        states = torch.cat(entity_states, dim=1).float().cpu() if entity_states else torch.ones_like(hidden)
        results.extend((hidden[row, :len(doc.input_ids)], states[row, :len(doc.input_ids)])
                       for row, doc in enumerate(group))
    return results


def _pad(values: list[int], length: int, fill: int) -> list[int]:
    return list(values) + [fill] * (length - len(values))


def last_subtokens(doc: EntityDocument, n_words: int) -> list[int]:
    """The position of each word's last sub-token."""
    last = [-1] * n_words
    for position, word in enumerate(doc.word_index):
        if word >= 0:
            last[word] = position
    if min(last, default=0) < 0:
        raise ValueError(f"{doc.doc_id}: some words have no sub-token")
    return last


def mention_vectors(model, coref_docs: list[CorefDocument], encoded: list[EntityDocument], seq_len: int,
                    use_entities: bool = True) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Per mention in a POS group (module docstring): a frame (doc_id, cluster, group, text), the mention
    vectors (M, C) and the entity states read at them (M, C)."""
    rows, vectors, states = [], [], []
    for coref in coref_docs:
        if coref.pos is None:
            raise ValueError(f"{coref.doc_id} has no POS tags: the mention groups need them (use GUM)")
    for coref, doc, (hidden, entity_states) in zip(coref_docs, encoded,
                                                   document_states(model, encoded, seq_len, use_entities)):
        last = last_subtokens(doc, len(coref.tokens))
        innermost = coref.token_clusters("innermost")
        for mention in coref.mentions:
            word = mention.end - 1
            group = next((name for name, tags in POS_GROUPS.items() if coref.pos[word] in tags), None)
            if group is None or innermost[word] != mention.cluster_id:
                continue
            rows.append({"doc_id": coref.doc_id, "cluster": mention.cluster_id, "group": group,
                         "text": " ".join(coref.tokens[mention.start:mention.end])})
            vectors.append(hidden[last[word]])
            states.append(entity_states[last[word]])
    if not rows:
        raise ValueError("no mention of a POS group in these documents")
    return pd.DataFrame(rows), torch.stack(vectors).numpy(), torch.stack(states).numpy()


# ---------------------------------------------------------------------------------------------------
# Table 4: cosine similarities


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def mention_similarity(vectors: np.ndarray, clusters: list) -> float:
    """Mean over clusters with >= 2 members of the mean pairwise cosine among their vectors (NaN: none)."""
    unit = _unit(vectors)
    by_cluster: dict = {}
    for index, cluster in enumerate(clusters):
        by_cluster.setdefault(cluster, []).append(index)
    means = []
    for members in by_cluster.values():
        if len(members) < 2:
            continue
        sims = unit[members] @ unit[members].T  # (m, m)
        m = len(members)
        means.append((sims.sum() - np.trace(sims)) / (m * (m - 1)))  # off-diagonal mean
    return float(np.mean(means)) if means else float("nan")


def entity_similarity(vectors: np.ndarray, entity_states: np.ndarray) -> float:
    """Mean row-wise cosine between mention vectors and the entity states read at them."""
    return float(np.mean(np.sum(_unit(vectors) * _unit(entity_states), axis=-1)))


def similarity_rows(meta: pd.DataFrame, vectors: np.ndarray, entity_states: np.ndarray, setting: str) -> list[dict]:
    """Table 4's four cells of one setting (mention / entity similarity x NN* / PRP*), as tidy rows."""
    rows = []
    for group in POS_GROUPS:
        mask = (meta["group"] == group).to_numpy()
        clusters = list(zip(meta["doc_id"][mask], meta["cluster"][mask]))
        rows.append({"setting": setting, "measure": "mention similarity", "group": group,
                     "value": mention_similarity(vectors[mask], clusters) if mask.any() else float("nan"),
                     "mentions": int(mask.sum())})
        rows.append({"setting": setting, "measure": "entity similarity", "group": group,
                     "value": entity_similarity(vectors[mask], entity_states[mask]) if mask.any() else float("nan"),
                     "mentions": int(mask.sum())})
    return rows


# ---------------------------------------------------------------------------------------------------
# t-SNE of mention vectors


def tsne_frame(meta: pd.DataFrame, vectors: np.ndarray, top_entities: int, seed: int = 0) -> pd.DataFrame:
    """2-D t-SNE of the mentions of the ``top_entities`` entities with most mentions; ``entity`` labels them
    by document and first mention."""
    from sklearn.manifold import TSNE

    key = meta["doc_id"].astype(str) + "/" + meta["cluster"].astype(str)
    top = key.value_counts().head(top_entities).index
    mask = key.isin(top).to_numpy()
    names = {k: f"{meta['text'][key == k].iloc[0]} ({k.split('/')[0]})" for k in top}
    chosen = vectors[mask]
    perplexity = float(min(30, max(2, len(chosen) - 1) / 3))  # t-SNE needs perplexity < n
    points = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(chosen)
    return pd.DataFrame({"x": points[:, 0], "y": points[:, 1], "entity": [names[k] for k in key[mask]],
                         "group": meta["group"][mask].to_numpy()})


def plot_tsne(frames: dict[str, pd.DataFrame], title: str = ""):
    """One panel per model, points coloured by entity, marker by POS group."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="white")
    figure, axes = plt.subplots(1, len(frames), figsize=(5.5 * len(frames), 5), squeeze=False)
    for axis, (name, frame) in zip(axes[0], frames.items()):
        sns.scatterplot(data=frame, x="x", y="y", hue="entity", style="group", s=35, ax=axis,
                        legend=axis is axes[0][-1])
        axis.set(title=name, xlabel="", ylabel="", xticks=[], yticks=[])
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------------------------
# NER probe


def span_scores(gold: list[list[str]], predicted: list[list[str]]) -> pd.DataFrame:
    """Micro precision / recall / F1 of typed spans (exact match), per type and ``overall``; ``support`` is
    the number of gold spans."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted tag sequences differ in number or length")
    counts: dict[str, list[int]] = {}  # type -> [true positives, predicted, gold]

    def count(kind: str, column: int) -> None:
        counts.setdefault(kind, [0, 0, 0])[column] += 1

    for gold_tags, predicted_tags in zip(gold, predicted):
        gold_spans = {(s.start, s.end, s.entity_type) for s in iob_spans(gold_tags)}
        predicted_spans = {(s.start, s.end, s.entity_type) for s in iob_spans(predicted_tags)}
        for span in gold_spans:
            count(span[2], 2)
        for span in predicted_spans:
            count(span[2], 1)
            if span in gold_spans:
                count(span[2], 0)
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    rows = []
    for kind, (tp, n_predicted, n_gold) in [*sorted(counts.items()), ("overall", total)]:
        precision = tp / n_predicted if n_predicted else 0.0
        recall = tp / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append({"type": kind, "precision": precision, "recall": recall, "f1": f1, "support": n_gold})
    return pd.DataFrame(rows)


@dataclass
class TaggedSentence:
    """One sentence for the NER probe: the frozen vector of each word and its IOB entity tags."""

    features: torch.Tensor  # (n_words, C), frozen word vectors
    tags: list[str]


def tagged_sentences(model, coref_docs: list[CorefDocument], encoded: list[EntityDocument], seq_len: int,
                     use_entities: bool = True) -> list[TaggedSentence]:
    """Every sentence of the documents with the frozen word vectors of ``model`` and its IOB entity tags."""
    sentences = []
    for coref, doc, (hidden, _) in zip(coref_docs, encoded, document_states(model, encoded, seq_len, use_entities)):
        words = hidden[last_subtokens(doc, len(coref.tokens))]  # (n_words, C)
        tags = coref.entity_iob()
        bounds = [*coref.sentence_starts, len(coref.tokens)]
        sentences.extend(TaggedSentence(words[a:b], tags[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a)
    return sentences


def standardise(train: list[TaggedSentence], *others: list[TaggedSentence]) -> list[list[TaggedSentence]]:
    """Every sentence's features standardised per dimension with the mean and std of the training words.

    An affine map the tagger could learn itself, applied alike to every model's vectors: LM hidden states
    share a large common direction (mention similarities near 1 in a small model), which slows the probe down.
    """
    words = torch.cat([s.features for s in train])  # (N, C)
    mean, std = words.mean(0), words.std(0).clamp(min=1e-6)
    return [[TaggedSentence((s.features - mean) / std, s.tags) for s in part] for part in (train, *others)]


class BiLSTMTagger(nn.Module):
    """Dropout -> bidirectional LSTM -> dropout -> linear tag scores (Lample et al. 2016, no CRF)."""

    def __init__(self, n_features: int, hidden_size: int, n_tags: int, dropout: float = 0.5):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(n_features, hidden_size, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden_size, n_tags)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T, C), (B,) -> tag scores (B, T, n_tags)."""
        packed = nn.utils.rnn.pack_padded_sequence(self.dropout(features), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        output, _ = self.lstm(packed)
        output, _ = nn.utils.rnn.pad_packed_sequence(output, batch_first=True, total_length=features.size(1))
        return self.out(self.dropout(output))  # (B, T, n_tags)


def tag_vocabulary(sentences: list[TaggedSentence]) -> list[str]:
    """``O`` first, then every B-/I- tag of the training sentences, sorted."""
    return ["O", *sorted({tag for s in sentences for tag in s.tags} - {"O"})]


def _collate(sentences: list[TaggedSentence], tag_ids: dict[str, int]):
    lengths = torch.tensor([len(s.tags) for s in sentences])
    features = nn.utils.rnn.pad_sequence([s.features for s in sentences], batch_first=True)  # (B, T, C)
    targets = torch.full(features.shape[:2], IGNORE_INDEX, dtype=torch.long)  # (B, T)
    for row, sentence in enumerate(sentences):
        targets[row, :len(sentence.tags)] = torch.tensor([tag_ids.get(t, 0) for t in sentence.tags])
    return features, lengths, targets


@torch.no_grad()
def predict_tags(tagger: BiLSTMTagger, sentences: list[TaggedSentence], tags: list[str],
                 batch_size: int = 64) -> list[list[str]]:
    """The tagger's highest-scoring tag (no CRF) for every word of each sentence, in batches of ``batch_size``."""
    tagger.eval()
    device = next(tagger.parameters()).device
    predicted = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        features, lengths, _ = _collate(chunk, {})
        best = tagger(features.to(device), lengths).argmax(-1).cpu()  # (B, T)
        predicted.extend([tags[i] for i in best[row, :len(s.tags)].tolist()] for row, s in enumerate(chunk))
    return predicted


@dataclass
class NerProbeTask(TrainTask):
    """Trains a :class:`BiLSTMTagger` with the shared loop; ``evaluate`` gives ``val_loss`` and ``val_f1``."""

    train_sentences: list[TaggedSentence]
    valid_sentences: list[TaggedSentence]
    tags: list[str]
    batch_size: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.train_sentences or not self.valid_sentences:
            raise ValueError("NerProbeTask needs training and validation sentences")
        self.tag_ids = {tag: index for index, tag in enumerate(self.tags)}

    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_sentences) / self.batch_size)

    def batches(self, epoch: int):
        order = list(self.train_sentences)
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return [_collate(order[i:i + self.batch_size], self.tag_ids) for i in range(0, len(order), self.batch_size)]

    def loss(self, model, batch):
        features, lengths, targets = batch
        scores = model(features, lengths)  # (B, T, n_tags)
        return F.cross_entropy(scores.reshape(-1, scores.size(-1)), targets.to(scores.device).reshape(-1),
                               ignore_index=IGNORE_INDEX), {}

    def evaluate(self, model) -> dict[str, float]:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for start in range(0, len(self.valid_sentences), 64):
            features, lengths, targets = _collate(self.valid_sentences[start:start + 64], self.tag_ids)
            scores = model(features.to(device), lengths)
            total += F.cross_entropy(scores.reshape(-1, scores.size(-1)), targets.to(device).reshape(-1),
                                     ignore_index=IGNORE_INDEX, reduction="sum").item()
            count += int((targets != IGNORE_INDEX).sum())
        predicted = predict_tags(model, self.valid_sentences, self.tags)
        scores = span_scores([s.tags for s in self.valid_sentences], predicted)
        return {"val_loss": total / count, "val_f1": float(scores.iloc[-1]["f1"])}
