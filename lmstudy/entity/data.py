"""Entity-annotated LM data for GPT2E: coreference documents -> sub-token ids + entity ids -> batches.

The paper's data format (its Table 1, after Ji et al. 2017): every token carries a second variable E, the
entity it is part of, or ∅. Here, per document:

- Words: ``CorefDocument.tokens`` joined by single spaces (no detokenisation, so ``do n't`` stays split; the
  same text for GPT2 and GPT2E, which is what the comparison needs), encoded by a byte-level BPE (GPT-2's by
  default). Each sub-token belongs to the word its last character is in (GPT-2 puts the space before a word
  into the word's first sub-token).
- Entity ids: a word's cluster is :meth:`CorefDocument.token_clusters` with the **innermost** rule (in
  "[[her] sister]" "her" is her, "sister" the sister; the outer mention's first word goes to the inner
  one); every sub-token of the word takes its word's id. Clusters become per-document ids 1..K in order of
  first appearance; 0 (``NULL_ENTITY``) is ∅. So ids never mean the same entity across documents, which
  is what lets the memory be one tensor slot per id.
- Every document starts with ``<|endoftext|>`` (entity ∅), so its first word is predicted too.
- LAMBADA (the out-of-domain test): :func:`encode_plain_document`, entity ∅ everywhere, as in the paper.

Chunks and batches. A document of n sub-tokens gives ``ceil((n-1)/seq_len)`` chunks: inputs
``ids[i*L:(i+1)*L]``, targets shifted by one, never crossing documents (the last chunk is shorter). A batch
holds B *rows*; each row reads its documents chunk after chunk (documents assigned to rows greedily, each to
the row with the fewest chunks so far, so the rows end together), so row b of step k+1 continues row b of
step k and the entity memory can be carried as the training loop's ``carry``. ``new_document[b]`` is true
when row b's chunk is a document's first (the memory of that row is reset to ones). Short chunks are
right-padded (input ``pad_id``, target -100, entity ∅); a row with no chunk left gets an all-pad chunk.

:class:`EntityLMTask` trains GPT2E (or the same model without entity layers, our GPT2 baseline) with the
shared loop, stateful, and evaluates per-document with the memory carried across chunks.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
import torch.nn.functional as F

from lmstudy.data.readers.coref import CorefDocument
from lmstudy.training import TrainTask

NULL_ENTITY = 0
IGNORE_INDEX = -100
CORPORA = ("gum", "litbank")


@dataclass
class EntityDocument:
    """One document as sub-token ids with one entity id per sub-token (0 = none)."""

    doc_id: str
    input_ids: list[int]
    entity_ids: list[int]
    word_index: list[int]  # the CorefDocument word of each sub-token; -1 for <|endoftext|> and spaces

    def __post_init__(self) -> None:
        if not (len(self.input_ids) == len(self.entity_ids) == len(self.word_index)):
            raise ValueError(f"{self.doc_id}: input_ids, entity_ids and word_index differ in length")

    @property
    def n_entities(self) -> int:
        return max(self.entity_ids, default=NULL_ENTITY)


def _encode_words(words: list[str], tokenizer) -> tuple[list[int], list[int]]:
    """Sub-token ids of ``" ".join(words)`` and the word index of each sub-token (-1: a bare space)."""
    text = " ".join(words)
    word_of_char = []
    for index, word in enumerate(words):
        if index:
            word_of_char.append(-1)  # the joining space
        word_of_char.extend([index] * len(word))
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    word_index = [word_of_char[end - 1] if end > 0 else -1 for _, end in encoding["offset_mapping"]]
    return list(encoding["input_ids"]), word_index


def encode_coref_document(doc: CorefDocument, tokenizer, rule: str = "innermost") -> EntityDocument:
    """Sub-tokens and per-sub-token entity ids of a coreference document (see the module docstring)."""
    clusters = doc.token_clusters(rule)  # one cluster id (or None) per word
    local: dict[int, int] = {}
    for cluster in clusters:  # ids 1..K in order of first appearance
        if cluster is not None and cluster not in local:
            local[cluster] = len(local) + 1
    ids, word_index = _encode_words(doc.tokens, tokenizer)
    entities = [NULL_ENTITY if w < 0 or clusters[w] is None else local[clusters[w]] for w in word_index]
    eos = tokenizer.eos_token_id
    return EntityDocument(doc.doc_id, [eos, *ids], [NULL_ENTITY, *entities], [-1, *word_index])


def encode_plain_document(doc_id: str, text: str, tokenizer) -> EntityDocument:
    """A document without annotation (LAMBADA): entity ∅ everywhere."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    n = len(ids) + 1
    return EntityDocument(doc_id, [tokenizer.eos_token_id, *ids], [NULL_ENTITY] * n, [-1] * n)


def load_entity_documents(
    corpus: str, split: str, tokenizer=None, limit: int | None = None, rule: str = "innermost"
) -> list[EntityDocument]:
    """Encoded documents of GUM/OntoGUM (official split: train / dev / test) or LitBank (train/dev/test),
    or LAMBADA (dev / test; no entities). ``tokenizer`` defaults to GPT-2's."""
    import itertools

    from lmstudy.data import iter_documents
    from lmstudy.data.catalogue import corpus_path

    if tokenizer is None:
        from lmstudy.tokenization import gpt2_tokenizer

        tokenizer = gpt2_tokenizer()
    if corpus == "lambada":
        return [encode_plain_document(d.doc_id, d.text, tokenizer)
                for d in iter_documents("lambada", split=split, limit=limit)]
    if corpus == "gum":
        from lmstudy.data.readers.gum import read_gum_coref

        docs = read_gum_coref(corpus_path("gum"), split=split)
    elif corpus == "litbank":
        from lmstudy.data.readers.litbank import read_litbank_coref

        docs = read_litbank_coref(corpus_path("litbank"), split=split)
    else:
        raise ValueError(f"corpus {corpus!r} is not one of {CORPORA + ('lambada',)}")
    return [encode_coref_document(doc, tokenizer, rule) for doc in itertools.islice(docs, limit)]


# ---------------------------------------------------------------------------------------------------
# chunks and batches


@dataclass
class Chunk:
    """One window of a document: input ids, next-token targets, entity ids, and whether it is the first."""

    input_ids: list[int]
    targets: list[int]
    entity_ids: list[int]
    first: bool  # the document's first chunk


def document_chunks(doc: EntityDocument, seq_len: int) -> list[Chunk]:
    """Consecutive (input, target, entity) windows of one document; the last may be shorter."""
    n_targets = len(doc.input_ids) - 1
    return [
        Chunk(doc.input_ids[start:start + seq_len], doc.input_ids[start + 1:start + 1 + seq_len],
              doc.entity_ids[start:start + seq_len], first=start == 0)
        for start in range(0, n_targets, seq_len)
    ]


@dataclass
class EntityBatch:
    """Padded chunks, one per row; row b continues row b of the previous batch (:func:`stream_batches`)."""

    input_ids: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T), IGNORE_INDEX at padding
    entity_ids: torch.Tensor  # (B, T)
    new_document: torch.Tensor  # (B,) bool

    def to(self, device, non_blocking: bool = False) -> "EntityBatch":
        return EntityBatch(*(t.to(device, non_blocking=non_blocking) for t in (self.input_ids, self.targets, self.entity_ids,
                                                    self.new_document)))


def assign_rows(docs: list[EntityDocument], n_rows: int, seq_len: int) -> list[list[Chunk]]:
    """The chunks each row reads, documents kept whole and in the given order within a row."""
    rows: list[list[Chunk]] = [[] for _ in range(n_rows)]
    for doc in docs:
        shortest = min(range(n_rows), key=lambda r: len(rows[r]))
        rows[shortest].extend(document_chunks(doc, seq_len))
    return rows


def _pad(values: list[int], length: int, fill: int) -> list[int]:
    return values + [fill] * (length - len(values))


def stream_batches(docs: list[EntityDocument], batch_size: int, seq_len: int, pad_id: int) -> Iterator[EntityBatch]:
    """Batches whose row b continues row b of the previous batch (see the module docstring)."""
    rows = assign_rows(docs, batch_size, seq_len)
    empty = Chunk([], [], [], first=True)
    for step in range(max(len(row) for row in rows)):
        chunks = [row[step] if step < len(row) else empty for row in rows]
        T = max(len(c.input_ids) for c in chunks)
        yield EntityBatch(
            torch.tensor([_pad(c.input_ids, T, pad_id) for c in chunks]),  # (B, T)
            torch.tensor([_pad(c.targets, T, IGNORE_INDEX) for c in chunks]),  # (B, T)
            torch.tensor([_pad(c.entity_ids, T, NULL_ENTITY) for c in chunks]),  # (B, T)
            torch.tensor([c.first for c in chunks]),  # (B,)
        )


def batch_loss(model, batch: EntityBatch, memory, reduction: str = "mean"):
    """(loss, memory after the batch) of GPT2E (or its baseline) on one batch; memory None = fresh."""
    device = next(model.parameters()).device
    batch = batch.to(device)
    out = model(batch.input_ids, entity_ids=batch.entity_ids, entity_memory=memory,
                new_document=batch.new_document)
    logits = out.logits  # (B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), batch.targets.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction=reduction)
    return loss, out.entity_memory


@torch.no_grad()
def entity_stream_loss(model, docs: list[EntityDocument], seq_len: int, batch_size: int, pad_id: int) -> float:
    """Mean next-token loss (nats) over every sub-token of ``docs`` after each document's <|endoftext|>,
    each document read in chunks of ``seq_len`` with the entity memory carried from chunk to chunk."""
    was_training = model.training
    model.eval()
    total, count, memory = 0.0, 0, None
    for batch in stream_batches(docs, batch_size, seq_len, pad_id):
        loss, memory = batch_loss(model, batch, memory, reduction="sum")
        total += loss.item()
        count += int((batch.targets != IGNORE_INDEX).sum())
    model.train(was_training)
    return total / count


@dataclass
class EntityLMTask(TrainTask):
    """Train GPT2E / GPT2 on entity documents with the shared loop; the entity memory is the carry.

    Each epoch shuffles the documents (seeded by ``seed`` and the epoch, so resuming replays it) and reads
    them with :func:`stream_batches`. ``evaluate`` reports ``val_loss`` and ``val_ppl`` of ``valid_docs``.
    """

    train_docs: list[EntityDocument]
    valid_docs: list[EntityDocument]
    batch_size: int
    seq_len: int
    pad_id: int
    eval_batch_size: int | None = None
    seed: int = 0

    stateful = True

    def __post_init__(self) -> None:
        if not self.train_docs or not self.valid_docs:
            raise ValueError("EntityLMTask needs training and validation documents")
        if self.batch_size < 1 or self.seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {self.batch_size}, {self.seq_len}")

    def batches(self, epoch: int) -> Iterable[EntityBatch]:
        order = list(self.train_docs)
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return list(stream_batches(order, self.batch_size, self.seq_len, self.pad_id))

    def loss(self, model, batch: EntityBatch, carry):
        # Summed, then divided by the batch's target count: a batch (or a part of one, when the loop cuts it
        # between processes) whose rows are all padding gives 0, not 0 / 0.
        total, memory = batch_loss(model, batch, carry, reduction="sum")  # GPT2E returns the memory detached
        return total / max(self.batch_weight(batch), 1), {}, memory

    def batch_weight(self, batch: EntityBatch) -> int:
        """The number of targets (what ``loss`` averages over), so parts of a batch count by their tokens."""
        return int((batch.targets != IGNORE_INDEX).sum())

    def evaluate(self, model) -> dict[str, float]:
        loss = entity_stream_loss(model, self.valid_docs, self.seq_len, self.eval_batch_size or self.batch_size,
                                  self.pad_id)
        return {"val_loss": loss, "val_ppl": math.exp(loss)}
