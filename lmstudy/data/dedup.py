"""Near-duplicate detection by 13-word shingles: the split hygiene of :mod:`lmstudy.data.splits`.

Words and shingles
    The words of a document are the lower-cased ``\\w+`` tokens of its **raw** text
    (:func:`shingle_words`), so differences of quote characters, punctuation, case and whitespace
    vanish (Reuters 230 and 240 differ only in quotes). A shingle is a run of 13 consecutive words
    (:data:`SHINGLE_WORDS`, long enough that a shared one is almost never chance: common phrases
    are shorter, templated text with names or numbers in it differs within 13 words). A document
    with fewer than 13 words has one shingle, its whole word sequence: it can then only match a
    document with exactly the same words. WikiText's ``<unk>`` marks masked words; the
    ``unk=`` option cuts the text there so that no shingle spans a masked word (MANIFEST.md's recipe).

Hashes
    Each distinct word gets a stable 64-bit hash (blake2b of its UTF-8 bytes, never Python's salted
    ``hash()``, so hashes are the same in every process and can be cached on disk); a shingle's
    hash is a polynomial rolling hash of its 13 word hashes modulo 2^64, finalised with splitmix64's
    mixer (numpy, one vectorised pass per document). A document is the sorted set of its distinct
    shingle hashes. Two different shingles collide with probability ~2^-64 per pair: with ~10^8
    shingles in all corpora, a chance collision is expected about once in 10^3 full runs, and
    one shared shingle never links two long documents anyway.

Shared shingles and clusters
    :func:`shared_shingle_counts` counts, for every pair of documents of one or two collections, how
    many distinct shingles they share: an exact inverted index (all (hash, document) entries sorted
    by hash once; each entry paired with the other documents of its run of equal hashes), pairs
    expanded in numpy and counted with ``np.unique``, in chunks to bound memory (Wikipedia, 21.5M
    shingles of 105k documents: ~10 s). A shingle found in more than
    :data:`MAX_DOCUMENT_FREQUENCY` (1,000) documents would cost O(df^2) pairs and is not counted; in
    our corpora the most frequent one is in 662 documents (a Wikipedia stub template), so the cap is
    only a guard. Boilerplate is otherwise counted like any text: the leak test counts it too.

    :func:`near_duplicate_clusters` links two documents when the shingles they share are at least
    :data:`LINK_FRACTION` (0.2) of the **smaller** document's distinct shingles, and returns the
    connected components (``scipy.sparse.csgraph``; union-find in effect). Why 0.2: the leak test
    (``tests/test_leakage.py``) asks that no valid/test document has half or more of its shingles in
    the training text. A document with half of its shingles in other documents almost always has a
    large part of them in one or two documents (a copy, an edited copy, a quoting post, a templated
    stub of the same series), so a link at 0.2 catches it with room to spare; 0.5 would miss a
    document whose copied half is spread over two sources. With 0.2 the test holds on every domain
    (on the v1 splits, 136 Wikipedia and 40 news valid/test documents failed it). Lower thresholds
    link more documents through one shared quotation or factoid, which chains clusters (the
    Wikipedia stubs already form clusters of up to 3,746 documents; IRC's bot factoids chain 53 logs),
    and a cluster larger than half a part's target cannot go into it. ``units`` ties documents that
    must stay together whatever their text (the 50-message windows of one IRC log).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

DEDUP_VERSION = 1  # bump when words, shingles or hashes change (it keys the on-disk caches)
SHINGLE_WORDS = 13
LINK_FRACTION = 0.2
MAX_DOCUMENT_FREQUENCY = 1000

_WORD = re.compile(r"\w+")
_ROLL = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling hash (the golden-ratio constant)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting: numpy 2's hash-based ``np.unique`` is ~5x slower on uint64 hashes."""
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def shingle_words(text: str) -> list[str]:
    """The words shingles are made of: lower-cased ``\\w+`` tokens of the raw text."""
    return _WORD.findall(text.lower())


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads the rolling hash's bits (uint64 arithmetic wraps mod 2^64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class ShingleHasher:
    """Text -> sorted distinct shingle hashes (uint64). Keeps a word -> hash table so that each
    distinct word is hashed with blake2b once per process."""

    def __init__(self, n: int = SHINGLE_WORDS) -> None:
        self.n = n
        self._ids: dict[str, int] = {}
        self._hashes = np.zeros(0, dtype=np.uint64)

    def _word_hashes(self, words: list[str]) -> np.ndarray:
        ids = self._ids
        index = list(map(ids.get, words))  # None for a word not seen yet
        before = len(ids)
        if None in index:
            for position, word in enumerate(words):
                if index[position] is None:
                    index[position] = ids.setdefault(word, len(ids))
            if len(ids) > len(self._hashes):  # grow by doubling: appending per document would be quadratic
                grown = np.zeros(max(2 * len(self._hashes), len(ids)), dtype=np.uint64)
                grown[:before] = self._hashes[:before]
                self._hashes = grown
            # the new words in id order (their first occurrences); slicing the dict would walk all of it
            new = list(dict.fromkeys(word for word, i in zip(words, index) if i >= before))
            self._hashes[before:len(ids)] = np.fromiter(
                (int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
                 for word in new), dtype=np.uint64, count=len(new))
        return self._hashes[np.array(index, dtype=np.int64)]

    def _segment(self, words: list[str]) -> np.ndarray:
        hashes = self._word_hashes(words)
        count = len(hashes) - self.n + 1
        if count < 1:  # shorter than a shingle: the whole sequence is the one shingle
            count, width = 1, len(hashes)
        else:
            width = self.n
        rolled = np.zeros(count, dtype=np.uint64)
        for offset in range(width):  # hash = sum_i w[i] * ROLL^(width-1-i), mod 2^64
            rolled = rolled * _ROLL + hashes[offset:offset + count]
        return _mix(rolled + np.uint64(width))  # the length keeps short sequences apart from long ones

    def __call__(self, text: str, unk: str | None = None) -> np.ndarray:
        """The sorted distinct shingle hashes of ``text``; ``unk``: a mask token no shingle may span
        (segments shorter than a shingle then contribute nothing unless the whole text is short)."""
        if unk is None:
            return self.of_segments([shingle_words(text)])
        segments = [shingle_words(part) for part in text.split(unk)]
        long_enough = [words for words in segments if len(words) >= self.n]
        # a short text: its words, masks aside, as one shingle
        return self.of_segments(long_enough or [[word for words in segments for word in words]])

    def of_segments(self, segments: list[list[str]]) -> np.ndarray:
        """The sorted distinct shingle hashes of word sequences (no shingle spans two of them)."""
        hashed = [self._segment(words) for words in segments if words]
        return sorted_unique(np.concatenate(hashed)) if hashed else np.zeros(0, dtype=np.uint64)


@dataclass
class ShingleSets:
    """The shingle sets of many documents, concatenated: document ``i`` has the sorted distinct hashes
    ``hashes[offsets[i]:offsets[i + 1]]``; ``keys[i]`` names it."""

    keys: list[str]
    hashes: np.ndarray   # uint64
    offsets: np.ndarray  # int64, len(keys) + 1

    @classmethod
    def from_arrays(cls, keys: Sequence[str], arrays: Sequence[np.ndarray]) -> ShingleSets:
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        hashes = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint64)
        return cls(list(keys), hashes.astype(np.uint64, copy=False), offsets)

    @classmethod
    def from_texts(cls, items: Iterable[tuple[str, str]], unk: str | None = None) -> ShingleSets:
        """From ``(key, text)`` pairs."""
        hasher = ShingleHasher()
        keys, arrays = [], []
        for key, text in items:
            keys.append(key)
            arrays.append(hasher(text, unk))
        return cls.from_arrays(keys, arrays)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def doc_index(self) -> np.ndarray:
        """The document index of every entry of ``hashes``."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.sizes)

    def select(self, indices: Iterable[int]) -> ShingleSets:
        indices = list(indices)
        return ShingleSets.from_arrays([self.keys[i] for i in indices],
                                       [self.hashes[self.offsets[i]:self.offsets[i + 1]] for i in indices])

    @staticmethod
    def concatenate(parts: Sequence[ShingleSets]) -> ShingleSets:
        keys = [key for part in parts for key in part.keys]
        hashes = np.concatenate([part.hashes for part in parts]) if parts else np.zeros(0, dtype=np.uint64)
        offsets = [np.zeros(1, dtype=np.int64)]
        total = 0
        for part in parts:
            offsets.append(part.offsets[1:] + total)
            total += part.offsets[-1]
        return ShingleSets(keys, hashes, np.concatenate(offsets))

    def restricted_to(self, reference: np.ndarray) -> ShingleSets:
        """The same documents with only their hashes that occur in ``reference``."""
        keep = contained(self.hashes, reference)
        offsets = np.zeros(len(self) + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.doc_index, weights=keep, minlength=len(self)).astype(np.int64), out=offsets[1:])
        return ShingleSets(self.keys, self.hashes[keep], offsets)

    def distinct(self) -> np.ndarray:
        """Every distinct hash of all documents, sorted."""
        return sorted_unique(self.hashes)


def contained(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Boolean mask: which of ``values`` (uint64) occur in ``reference`` (neither needs to be sorted).

    The reference is sorted, and the values are looked up in it grouped by their top 16 bits (a stable argsort
    of 16-bit keys, which numpy does as a radix sort, in linear time), not in their own order: the lookups of one
    group all fall in one narrow stretch of the reference, which stays in the cache, where lookups in random
    order missed it at every level of their binary searches. Shingle hashes are uniform over 64 bits, so the
    groups are even. 3-10x faster on the leak test's sizes (2M evaluation shingles against a 20M-shingle
    corpus, 20M against 1.8M); correct for any values, only slower when their top bits are all alike.
    """
    if len(values) == 0 or len(reference) == 0:
        return np.zeros(len(values), dtype=bool)
    reference = np.sort(reference)
    order = np.argsort((values >> np.uint64(48)).astype(np.uint16), kind="stable")
    grouped = values[order]
    position = np.minimum(np.searchsorted(reference, grouped), len(reference) - 1)
    found = np.empty(len(values), dtype=bool)
    found[order] = reference[position] == grouped
    return found


def coverage(queries: ShingleSets, *references: np.ndarray) -> np.ndarray:
    """Per query document, the fraction of its distinct shingles found in any of ``references`` (hash
    arrays, e.g. the ``hashes`` of training documents); 0 for an empty document."""
    found = np.zeros(len(queries.hashes), dtype=bool)
    for reference in references:
        found |= contained(queries.hashes, reference)
    per_document = np.bincount(queries.doc_index, weights=found, minlength=len(queries))
    return per_document / np.maximum(queries.sizes, 1)


def shared_shingle_counts(
    left: ShingleSets,
    right: ShingleSets | None = None,
    max_df: int = MAX_DOCUMENT_FREQUENCY,
    chunk: int = 20_000_000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of documents sharing shingles: ``(i, j, count)`` arrays, ``i`` a document of ``left``,
    ``j`` of ``right``, ``count`` their distinct shared shingles. ``right=None``: pairs within
    ``left``, each once with ``i < j``. Shingles in more than ``max_df`` documents (both sides
    together) are boilerplate and not counted (module docstring).

    The inverted index: every (hash, document) entry of both sides sorted by hash once (stable, so
    that within a run of equal hashes the left entries come first); each entry is paired with the
    later entries of its run (within) or a left entry with the right entries of its run (across).
    Pairs are expanded about ``chunk`` at a time, reduced to (pair, count) with ``np.unique``, and the
    partial counts are summed at the end, so memory stays bounded whatever the corpus.
    """
    within = right is None
    if not within:  # only hashes on both sides can pair: drop the others first (cheap, often most of them)
        left = left.restricted_to(right.distinct())
        right = right.restricted_to(left.distinct())
    sides = [left] if within else [left, right]
    hashes = np.concatenate([side.hashes for side in sides])
    docs = np.concatenate([side.doc_index for side in sides])
    is_left = np.zeros(len(hashes), dtype=bool)
    is_left[:len(left.hashes)] = True
    order = np.argsort(hashes, kind="stable")
    hashes, docs, is_left = hashes[order], docs[order], is_left[order]
    del order
    # Runs of equal hashes: [run_start, run_end) for every entry.
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]]) if len(hashes) else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, len(hashes)])
    run_end = np.repeat(starts + lengths, lengths)
    if within:  # partners: the later entries of the run
        low = np.arange(len(hashes)) + 1
    else:  # partners of a left entry: the right entries of its run (they follow the left ones)
        left_in_run = np.add.reduceat(is_left.astype(np.int64), starts) if len(starts) else starts
        low = np.repeat(starts + left_in_run, lengths)
    counts = np.where(np.repeat(lengths, lengths) > max_df, 0, run_end - low)
    if not within:
        counts[~is_left] = 0
    del run_end, is_left
    n_right = len(left) if within else len(right)
    keys, shared = [], []
    cumulative = np.cumsum(counts)
    begin = 0
    while begin < len(counts):  # entries [begin, end) expand to about `chunk` pairs
        end = max(int(np.searchsorted(cumulative, cumulative[begin] - counts[begin] + chunk, side="right")),
                  begin + 1)
        part = counts[begin:end]
        total = int(part.sum())
        if total:
            block_start = np.repeat(np.cumsum(part) - part, part)
            partner = np.repeat(low[begin:end], part) + (np.arange(total) - block_start)
            pair = np.repeat(docs[begin:end], part) * np.int64(n_right) + docs[partner]
            pair, count = np.unique(pair, return_counts=True)
            keys.append(pair)
            shared.append(count)
        begin = end
    if not keys:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    pair = np.concatenate(keys)
    count = np.concatenate(shared)
    if len(keys) > 1:  # a pair may share hashes in several chunks: sum its partial counts
        pair, inverse = np.unique(pair, return_inverse=True)
        count = np.bincount(inverse, weights=count).astype(np.int64)
    return pair // n_right, pair % n_right, count.astype(np.int64)


def near_duplicate_pairs(
    sets: ShingleSets, link_fraction: float = LINK_FRACTION, max_df: int = MAX_DOCUMENT_FREQUENCY
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The linked pairs ``(i, j, shared)`` within ``sets``: shared >= link_fraction x the smaller set."""
    i, j, shared = shared_shingle_counts(sets, None, max_df)
    sizes = sets.sizes
    linked = shared >= link_fraction * np.minimum(sizes[i], sizes[j])
    return i[linked], j[linked], shared[linked]


def connected_components(n: int, pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Component label (0..k-1) of each of ``n`` items, the edges given as (i, j) index arrays."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as components

    rows = [np.asarray(i, dtype=np.int64) for i, _ in pairs]
    if not rows:
        return np.arange(n)
    i = np.concatenate(rows)
    j = np.concatenate([np.asarray(j, dtype=np.int64) for _, j in pairs])
    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(n, n))
    return components(graph, directed=False)[1]


def units_as_edges(units: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Edges that tie each document to the first document of its unit (None: a unit of its own)."""
    first_of: dict[str, int] = {}
    i, j = [], []
    for index, unit in enumerate(units):
        if unit is None:
            continue
        if unit in first_of:
            i.append(first_of[unit])
            j.append(index)
        else:
            first_of[unit] = index
    return np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)


def near_duplicate_clusters(
    sets: ShingleSets,
    units: Sequence[str | None] | None = None,
    link_fraction: float = LINK_FRACTION,
    max_df: int = MAX_DOCUMENT_FREQUENCY,
) -> np.ndarray:
    """Cluster label of every document: connected components of the near-duplicate links and of the
    ``units`` (documents with the same unit name belong together)."""
    i, j, _ = near_duplicate_pairs(sets, link_fraction, max_df)
    edges = [(i, j)]
    if units is not None:
        edges.append(units_as_edges(units))
    return connected_components(len(sets), edges)


__all__ = ["DEDUP_VERSION", "LINK_FRACTION", "MAX_DOCUMENT_FREQUENCY", "SHINGLE_WORDS", "ShingleHasher",
           "ShingleSets", "connected_components", "contained", "coverage",
           "near_duplicate_clusters", "near_duplicate_pairs", "shared_shingle_counts", "shingle_words",
           "units_as_edges"]
