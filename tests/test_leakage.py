"""The leak test on the real corpora (slow: minutes when the shingle caches are cold).

1. For every shuffled-split domain, no valid or test document has half or more of its distinct
   13-word shingles in that domain's train + pretrain text (split format v2 keeps near-duplicate
   clusters and IRC logs in one part).
2. No evaluation text (every domain's valid/test, WikiText-2 valid/test, LAMBADA dev/test, GUM and
   LitBank dev/test, PTB valid/test) has half or more of its shingles in the shared base model's
   training stream (:func:`lmstudy.data.parts.base_training_documents`: the pretrain parts minus
   the documents its manifest, :mod:`lmstudy.data.base_manifest`, drops).

Shingles come from ``lmstudy.data.splits.domain_shingles`` (one pass per corpus, cached on disk and
written by ``build_all_splits``), so each corpus is read at most once per run.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require_corpus
from lmstudy.data.dedup import coverage
from lmstudy.data.base_manifest import BASE_DOMAINS, EXTERNAL_EVALUATION, base_training_manifest, evaluation_shingles
from lmstudy.data.splits import DOMAINS, SHUFFLED_DOMAINS, domain_shingles, load_split, part_shingles

pytestmark = pytest.mark.slow
LEAK = 0.5  # half or more of a document's shingles


def require_domain_corpora(domains) -> None:
    for domain in domains:
        for corpus, _ in DOMAINS[domain].sources:
            require_corpus(corpus)


def leaked(sets, fractions) -> dict[str, float]:
    return {sets.keys[i]: round(float(fractions[i]), 3) for i in np.flatnonzero(fractions >= LEAK)}


@pytest.mark.parametrize("domain", SHUFFLED_DOMAINS)
def test_no_evaluation_document_is_in_its_domain_training_text(domain):
    require_domain_corpora([domain])
    split, sets = load_split(domain), domain_shingles(domain)
    part = [split.part_of(key) for key in sets.keys]
    training = sets.select(i for i, name in enumerate(part) if name in ("train", "pretrain")).hashes
    held_out = sets.select(i for i, name in enumerate(part) if name in ("valid", "test"))
    assert len(held_out) == split.documents["valid"] + split.documents["test"]
    assert leaked(held_out, coverage(held_out, training)) == {}


def test_no_evaluation_text_is_in_the_base_training_stream():
    require_domain_corpora(SHUFFLED_DOMAINS)
    for _, corpus, _, _ in EXTERNAL_EVALUATION:
        require_corpus(corpus)
    evaluation = evaluation_shingles()
    manifest = base_training_manifest()
    stream = []  # the shingles of each domain's part of the base stream
    for domain in BASE_DOMAINS:
        pretrain = part_shingles(domain, ["pretrain"])
        dropped = manifest["domains"][domain]["dropped"]
        assert set(dropped) <= set(pretrain.keys)
        stream.append(pretrain.select(i for i, key in enumerate(pretrain.keys) if key not in dropped).hashes)
    assert leaked(evaluation, coverage(evaluation, *stream)) == {}


def test_every_pretraining_split_leaves_out_evaluation_near_duplicates():
    """The books pretrain part (read by the Welch embeddings, not only the base) drops the LitBank chunk holding
    51% of LAMBADA passage test-03454 (The Hound of the Baskervilles), and what a reader of the part gets has no
    evaluation text half inside it."""
    from lmstudy.data.base_manifest import pretrain_dropped
    from lmstudy.data.parts import split_documents
    from lmstudy.data.splits import document_key

    require_domain_corpora(["books"])
    for _, corpus, _, _ in EXTERNAL_EVALUATION:
        require_corpus(corpus)
    dropped = pretrain_dropped("books")
    assert "lambada test|lambada:test-03454" in dropped["litbank:2852-00006"]
    read = {document_key("litbank", document) for document in split_documents("books", "pretrain")}
    assert "litbank:2852-00006" not in read and not read & set(dropped)
    assert len(read) == load_split("books").documents["pretrain"] - len(dropped)
    sets = domain_shingles("books")
    stream = sets.select(i for i, key in enumerate(sets.keys) if key in read)
    assert leaked(evaluation_shingles(), coverage(evaluation_shingles(), stream.hashes)) == {}
