"""The shared base model's training manifest: which pretrain documents near-duplicate an evaluation text.

Every evaluation text (:func:`evaluation_shingles`: every shuffled-split domain's valid and test parts, and
:data:`EXTERNAL_EVALUATION`: WikiText-2 valid/test, LAMBADA dev/test, GUM and LitBank dev/test, PTB valid/test)
is compared with every document of the pretrain parts of :data:`BASE_DOMAINS` by their 13-word shingles
(:mod:`lmstudy.data.dedup`); :func:`base_training_manifest` lists the documents dropped and why, and
:func:`pretrain_dropped` gives one domain's. The drops apply to every reader of a pretrain part
(:mod:`lmstudy.data.parts`, which also gives the base's stream, ``base_training_documents``), so this module
reads the splits unfiltered (:mod:`lmstudy.data.splits`) and the readers sit above it.
``tests/test_leakage.py`` checks the result on the real corpora.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import numpy as np
from tqdm.auto import tqdm

from lmstudy.data.dedup import DEDUP_VERSION, ShingleHasher, ShingleSets, shared_shingle_counts
from lmstudy.data.splits import SHUFFLED_DOMAINS, load_shingles, part_shingles, save_shingles, split_sha256
from lmstudy.paths import runs_dir
from lmstudy.runs import atomic_write_text

BASE_DOMAINS = ("wikipedia", "books", "reddit", "imdb", "news", "irc")
BASE_DROP_FRACTION = 0.1
EVALUATION_PARTS = ("valid", "test")


# --- the evaluation texts ---------------------------------------------------------------------------

# Evaluation texts outside the domains' own valid/test parts: (name, corpus, reader options, mask token).
# GUM and LitBank are read as the entity study reads them (coreference tokens joined by spaces).
EXTERNAL_EVALUATION = (
    ("wikitext-2 valid", "wikitext-2", {"split": "valid"}, "<unk>"),
    ("wikitext-2 test", "wikitext-2-raw", {"split": "test"}, None),  # raw: the tokenised file masks words
    ("lambada dev", "lambada", {"split": "dev"}, None),
    ("lambada test", "lambada", {"split": "test"}, None),
    ("lambada test detokenized", "lambada", {"split": "test", "detokenized": True}, None),
    ("gum dev", "gum", {"split": "dev"}, None),
    ("gum test", "gum", {"split": "test"}, None),
    ("litbank dev", "litbank", {"split": "dev"}, None),
    ("litbank test", "litbank", {"split": "test"}, None),
    ("ptb valid", "ptb", {"split": "valid"}, "<unk>"),
    ("ptb test", "ptb", {"split": "test"}, "<unk>"),
)


def _external_evaluation_texts() -> Iterator[tuple[str, str, str | None]]:
    """(key, text, mask token) of every external evaluation document; key = ``"<set>|<corpus>:<id>"``."""
    from lmstudy.data import iter_documents
    from lmstudy.data.catalogue import corpus_path

    for name, corpus, options, unk in EXTERNAL_EVALUATION:
        if corpus in ("gum", "litbank"):
            if corpus == "gum":
                from lmstudy.data.readers.gum import read_gum_coref as read_coref
            else:
                from lmstudy.data.readers.litbank import read_litbank_coref as read_coref
            for document in read_coref(corpus_path(corpus), **options):
                yield f"{name}|{corpus}:{document.doc_id}", " ".join(document.tokens), unk
        else:
            for document in iter_documents(corpus, **options):
                yield f"{name}|{corpus}:{document.doc_id}", document.text, unk


def evaluation_shingles() -> ShingleSets:
    """The shingle sets of every evaluation text: the valid and test parts of every shuffled-split
    domain (keys ``"<domain> <part>|<key>"``) and :data:`EXTERNAL_EVALUATION` (WikiText-2 valid/test,
    LAMBADA dev/test in both forms, GUM and LitBank dev/test, PTB valid/test). The external ones are
    cached, stamped with their corpora's checksums."""
    from lmstudy.data.catalogue import CHECKSUMS

    corpora = {corpus for _, corpus, _, _ in EXTERNAL_EVALUATION}
    stamp = {"dedup": DEDUP_VERSION, "sources": [list(map(str, source)) for source in EXTERNAL_EVALUATION],
             "files": {path: digest for path, digest in CHECKSUMS.items() if path.split("/")[0] in corpora}}
    external = load_shingles("evaluation", stamp)
    if external is None:
        hasher = ShingleHasher()
        keys, arrays = [], []
        for key, text, unk in tqdm(_external_evaluation_texts(), desc="shingles evaluation", unit=" docs"):
            keys.append(key)
            arrays.append(hasher(text, unk))
        external = ShingleSets.from_arrays(keys, arrays)
        save_shingles("evaluation", external, stamp)
    collections = [external]
    for domain in SHUFFLED_DOMAINS:
        for part in EVALUATION_PARTS:
            sets = part_shingles(domain, [part])
            collections.append(ShingleSets([f"{domain} {part}|{key}" for key in sets.keys], sets.hashes, sets.offsets))
    return ShingleSets.concatenate(collections)


# --- the manifest -------------------------------------------------------------------------------

def _base_manifest_stamp() -> dict:
    from lmstudy.data.catalogue import CHECKSUMS

    corpora = {corpus for _, corpus, _, _ in EXTERNAL_EVALUATION}
    return {
        "split_sha256": {domain: split_sha256(domain) for domain in SHUFFLED_DOMAINS},
        "evaluation_files": {path: digest for path, digest in CHECKSUMS.items() if path.split("/")[0] in corpora},
        "dedup": DEDUP_VERSION, "drop_fraction": BASE_DROP_FRACTION, "domains": list(BASE_DOMAINS),
    }


def base_training_manifest() -> dict:
    """Which pretrain documents near-duplicate an evaluation text, and why: left out of every pretrain part's
    readers (:func:`pretrain_dropped`; the shared base's stream, :func:`lmstudy.data.parts.base_training_documents`,
    among them). Returns ``{"stamp", "rule", "domains": {domain: {"pretrain":
    documents, "kept": documents, "dropped": {key: reason}, "dropped_by_set": {evaluation set: n},
    "dropped_by_rule": {rule: n}}}}``.

    Cached in ``runs_dir()/cache/base_training/manifest.json``, keyed by the split files' hashes, the
    evaluation corpora's checksums and the dedup parameters: the second call is free. The first
    needs every domain's shingles (:func:`lmstudy.data.splits.domain_shingles`: minutes when they are not
    cached).
    """
    path = runs_dir() / "cache" / "base_training" / "manifest.json"
    stamp = _base_manifest_stamp()
    if path.is_file():
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("stamp") == stamp:
            return manifest
    evaluation = evaluation_shingles()
    evaluation_hashes = evaluation.distinct()
    evaluation_set = [key.split("|", 1)[0] for key in evaluation.keys]
    percent = f"{BASE_DROP_FRACTION:.0%}"
    manifest = {"stamp": stamp, "rule": (
        f"a pretrain document is dropped when it contains >= {percent} of the distinct 13-word shingles of "
        f"an evaluation document ('contains'), or when >= {percent} of its own shingles occur in evaluation "
        "texts ('made of')"), "domains": {}}
    for domain in tqdm(BASE_DOMAINS, desc="base training manifest", unit=" domains"):
        pretrain = part_shingles(domain, ["pretrain"])
        # Each pretrain document with only its shingles that occur in evaluation texts: the only ones that can
        # pair with an evaluation document (1.), and how many of its own shingles do (2.). Looked up once here
        # (tens of millions of shingles in the largest domains), not once in each.
        in_evaluation = pretrain.restricted_to(evaluation_hashes)
        reasons: dict[int, tuple[str, str]] = {}  # pretrain index -> (rule, evaluation set)
        # 1. The evaluation document with the largest fraction inside each pretrain document.
        i, j, shared = shared_shingle_counts(in_evaluation, evaluation)
        fraction = shared / np.maximum(evaluation.sizes[j], 1)
        by_fraction = np.argsort(-fraction, kind="stable")
        for index in by_fraction[fraction[by_fraction] >= BASE_DROP_FRACTION]:
            if int(i[index]) not in reasons:
                reasons[int(i[index])] = (f"contains {fraction[index]:.0%} of evaluation text "
                                          f"{evaluation.keys[j[index]]}", evaluation_set[j[index]])
        # 2. Pretrain documents made of evaluation text (pieces of several evaluation documents).
        own = in_evaluation.sizes / np.maximum(pretrain.sizes, 1)  # coverage(pretrain, evaluation_hashes)
        for index in np.flatnonzero(own >= BASE_DROP_FRACTION):
            reasons.setdefault(int(index), (f"made of evaluation text: {own[index]:.0%} of its shingles",
                                            "several"))
        dropped = {pretrain.keys[index]: reason for index, (reason, _) in sorted(reasons.items())}
        manifest["domains"][domain] = {
            "pretrain": len(pretrain),
            "kept": len(pretrain) - len(dropped),
            "dropped_by_rule": dict(Counter(reason.split(" ")[0] for reason, _ in reasons.values())),
            "dropped_by_set": dict(Counter(evaluation_set for _, evaluation_set in reasons.values())),
            "dropped": dropped,
        }
    atomic_write_text(path, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


def pretrain_dropped(domain: str) -> dict[str, str]:
    """The documents of ``domain``'s pretrain part that near-duplicate an evaluation text, with the reason
    (:func:`base_training_manifest`'s rule): left out of the pretrain part for every reader (:mod:`lmstudy.data.parts`).
    Empty for a user corpus (no evaluation texts are checked against it) and for a domain whose pretrain part
    is another's (PTB reads news's, filtered there)."""
    if domain not in BASE_DOMAINS:
        if domain in SHUFFLED_DOMAINS:
            raise ValueError(f"domain {domain!r} has a pretrain part but is not in BASE_DOMAINS: the "
                             "evaluation-text filter would not cover it")
        return {}
    return base_training_manifest()["domains"][domain]["dropped"]


__all__ = ["BASE_DOMAINS", "BASE_DROP_FRACTION", "EVALUATION_PARTS", "EXTERNAL_EVALUATION", "base_training_manifest",
           "evaluation_shingles", "pretrain_dropped"]
