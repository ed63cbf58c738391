"""Near-duplicate detection (lmstudy.data.dedup) on synthetic documents."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from lmstudy.data.dedup import (
    SHINGLE_WORDS, ShingleHasher, ShingleSets, contained, coverage, near_duplicate_clusters, near_duplicate_pairs,
    shared_shingle_counts, shingle_words,
)

VOCABULARY = [f"w{i}" for i in range(500)]


def random_text(seed: int, words: int = 200) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choices(VOCABULARY, k=words))


def test_words_ignore_case_quotes_and_punctuation():
    assert shingle_words("He said: \u201cIt's OK\u201d -- 'fine'.") == ["he", "said", "it", "s", "ok", "fine"]
    hasher = ShingleHasher()
    text = 'The "quick" brown fox jumps over the lazy dog, said the farmer to his wife on Sunday.'
    twin = "the \u201cQuick\u201d brown fox jumps over the lazy dog -- said the farmer to his wife on sunday"
    assert np.array_equal(hasher(text), hasher(twin))


def test_hashes_are_stable_across_processes():
    """blake2b word hashes, not Python's salted hash(): a fixed text always has the same hashes."""
    text = " ".join(f"word{i}" for i in range(SHINGLE_WORDS + 1))
    hashes = ShingleHasher()(text)
    assert len(hashes) == 2 and hashes.dtype == np.uint64
    assert np.array_equal(ShingleHasher()(text), hashes)  # a fresh word table gives the same hashes
    assert int(hashes[0]) ^ int(hashes[1]) == 0xAEF73B240E77105E


def test_shingles_of_short_and_masked_texts():
    hasher = ShingleHasher()
    words = [f"x{i}" for i in range(30)]
    assert len(hasher(" ".join(words))) == 30 - SHINGLE_WORDS + 1
    # A text shorter than a shingle is one shingle: it matches only the same words, not a text holding them.
    short = hasher("x0 x1 x2")
    assert len(short) == 1 and np.array_equal(short, hasher("X0, x1; x2!"))
    assert not np.isin(short, hasher(" ".join(words))).any()
    assert len(hasher("")) == 0
    # No shingle spans a mask: 20 + 20 words around an <unk> give 2 x 8 shingles, all in the unmasked text.
    masked = hasher(" ".join(words[:20] + ["<unk>"] + words[21:30] + [f"y{i}" for i in range(11)]), unk="<unk>")
    assert len(masked) == (20 - SHINGLE_WORDS + 1) + (20 - SHINGLE_WORDS + 1)
    assert np.isin(hasher(" ".join(words[:20])), masked).all()


def test_shared_counts_match_brute_force():
    rng = random.Random(0)
    sets = ShingleSets.from_arrays([str(i) for i in range(40)],
                                   [np.unique(np.array(rng.sample(range(60), rng.randint(0, 15)), dtype=np.uint64))
                                    for _ in range(40)])
    as_sets = [set(sets.hashes[sets.offsets[k]:sets.offsets[k + 1]].tolist()) for k in range(len(sets))]
    expected = {(a, b): len(as_sets[a] & as_sets[b]) for a, b in itertools.combinations(range(40), 2)
                if as_sets[a] & as_sets[b]}
    for chunk in (7, 10_000):  # several chunks must sum to the same counts
        i, j, count = shared_shingle_counts(sets, chunk=chunk)
        assert dict(zip(zip(i.tolist(), j.tolist()), count.tolist())) == expected
    left, right = sets.select(range(25)), sets.select(range(25, 40))
    i, j, count = shared_shingle_counts(left, right, chunk=5)
    across = {(a, b - 25): n for (a, b), n in expected.items() if a < 25 <= b}
    assert dict(zip(zip(i.tolist(), j.tolist()), count.tolist())) == across
    # A hash in more documents than max_df is boilerplate: not counted.
    common = ShingleSets.from_arrays(["a", "b", "c"], [np.array([1, 2], dtype=np.uint64)] * 3)
    assert shared_shingle_counts(common, max_df=3)[2].tolist() == [2, 2, 2]
    assert len(shared_shingle_counts(common, max_df=2)[0]) == 0


def test_near_twins_cluster_and_unrelated_documents_do_not():
    base = random_text(1)
    edited = base.replace("w1 ", "W1, ").upper()[:-300] + " " + random_text(2, 40)  # case, commas, end changed
    texts = {"base": base, "edited": edited, "other": random_text(3), "another": random_text(4),
             "quotes": '"' + random_text(3).replace(" ", "' '") + '"'}
    sets = ShingleSets.from_texts(texts.items())
    labels = dict(zip(sets.keys, near_duplicate_clusters(sets)))
    assert labels["base"] == labels["edited"]
    assert labels["other"] == labels["quotes"]  # quote characters do not count
    assert len({labels["base"], labels["other"], labels["another"]}) == 3
    # Units tie documents together whatever their text.
    tied = near_duplicate_clusters(sets, units=[None, None, "log", "log", None])
    assert tied[2] == tied[3]


def test_link_threshold_is_a_fraction_of_the_smaller_document():
    long_text = random_text(5, 400)
    words = long_text.split()
    # A short document quoting 100 words of the long one, plus 100 words of its own: half of its shingles shared.
    quoting = " ".join(words[:100] + random_text(6, 100).split())
    unrelated_half = " ".join(random_text(7, 100).split() + random_text(8, 100).split())
    sets = ShingleSets.from_texts([("long", long_text), ("quoting", quoting), ("unrelated", unrelated_half)])
    i, j, shared = near_duplicate_pairs(sets)
    assert list(zip(i.tolist(), j.tolist())) == [(0, 1)]
    assert shared[0] / sets.sizes[1] == pytest.approx(88 / 188)  # 100 - 12 shared of 200 - 12
    # The 50% criterion of the leak test: the fraction of a document's shingles found in a reference text.
    fractions = coverage(sets.select([1, 2]), sets.select([0]).distinct())
    assert fractions[0] == pytest.approx(88 / 188) and fractions[1] == 0
    assert coverage(sets, sets.distinct()).tolist() == [1.0, 1.0, 1.0]
    # Below the threshold: 10 shared shingles of 188 (5%) are no link.
    slight = " ".join(words[:22] + random_text(9, 178).split())
    sets = ShingleSets.from_texts([("long", long_text), ("slight", slight)])
    assert len(near_duplicate_pairs(sets)[0]) == 0


def test_contained_with_a_reference_shorter_or_longer_than_the_values():
    values = np.array([5, 3, 5, 9, 1, 3], dtype=np.uint64)
    expected = [True, True, True, False, False, True]
    for reference in ([3, 5], [5, 3, 5, 7, 8, 11, 3, 12, 20, 0]):  # shorter and longer than values
        assert contained(values, np.array(reference, dtype=np.uint64)).tolist() == expected
    assert contained(values, np.zeros(0, dtype=np.uint64)).tolist() == [False] * 6


def test_contained_agrees_with_isin_on_hashes_spread_over_64_bits():
    """The lookups go grouped by the values' top 16 bits: spread values, duplicates and misses, in every group."""
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
    values = np.concatenate([reference[::3], reference[:50], rng.integers(0, 2**64, 15_000, dtype=np.uint64)])
    rng.shuffle(values)
    for part in (reference, reference[:300]):  # longer and shorter than the values
        found = contained(values, part)
        assert found.tolist() == np.isin(values, part).tolist() and 0 < found.sum() < len(values)
