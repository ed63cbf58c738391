"""Reading the parts of a split: their documents, their normalised tokens (cached) and the shared base's stream.

The one place parts are read is :func:`_iter_parts`, and there the pretrain part loses every document that
near-duplicates an evaluation text (:func:`lmstudy.data.base_manifest.pretrain_dropped`), whoever reads it: the
base's stream, the Welch embeddings, the rare-word tables. The splits themselves (domains, building, the split
files, shingles of their parts) are :mod:`lmstudy.data.splits`; the list of dropped documents is
:mod:`lmstudy.data.base_manifest`, which is computed from the unfiltered parts: this module sits above both.

- :func:`split_documents` streams the Documents of a part.
- :func:`split_tokens` / :func:`iter_split_sentences` / :func:`split_counts` read normalised tokens from a cache,
  ``runs_dir()/cache/tokens/<domain>.<part>.txt``, one sentence per line like ``ptb.train.txt``, written in one
  pass over the corpus the first time any part of the domain is asked for (a few minutes for the largest
  domains) and rebuilt when the split file, the normalisation version or the pretrain filter changes (recorded in
  a ``.json`` beside each file).
- :func:`base_training_documents`: the documents the shared base model trains on.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from lmstudy.data.base_manifest import BASE_DOMAINS, pretrain_dropped
from lmstudy.data.documents import Document
from lmstudy.data.splits import (PARTS, check_part, document_key, document_sentences, get_domain,
                                 iter_domain_documents, load_split, split_normalisation, split_sha256)
from lmstudy.paths import runs_dir
from lmstudy.runs import atomic_write_text
from lmstudy.text import count_tokens


# --- documents ------------------------------------------------------------------------------------

def split_documents(domain: str, part: str, limit: int | None = None) -> Iterator[Document]:
    """Stream the Documents of one part (train/valid/test/pretrain) of ``domain``'s committed split.

    ``limit``: stop after that many documents. Shuffled-split domains read the whole corpus (the
    part's documents are spread through it); use the token cache for repeated access.
    """
    check_part(part)
    spec = get_domain(domain)
    if part == "pretrain" and spec.pretrain_from:
        yield from split_documents(spec.pretrain_from, part, limit)
        return
    if limit is not None and limit <= 0:
        return
    yielded = 0
    for _, _, document in _iter_parts(domain, parts={part}):
        yield document
        yielded += 1
        if limit is not None and yielded >= limit:
            return


def _iter_parts(domain: str, parts: set[str]) -> Iterator[tuple[str, str, Document]]:
    """(part, key, Document) for the documents of ``domain`` in ``parts``, in reader order (PTB's
    pretraining part, which is another domain's, excluded)."""
    from lmstudy.data import iter_documents

    spec = get_domain(domain)
    if spec.official_parts:
        for part, (corpus, options) in spec.official_parts.items():
            if part in parts:
                for document in iter_documents(corpus, **options):
                    yield part, document_key(corpus, document), document
        return
    split = load_split(domain)
    # The pretrain part never holds an evaluation text's near-duplicate, whoever reads it (the base's stream, the
    # Welch embeddings, the rare-word tables): the manifest's drops apply here, the one place parts are read.
    dropped = pretrain_dropped(domain) if "pretrain" in parts else {}
    for key, document in iter_domain_documents(domain):
        part = split.part_of(key)
        if part in parts and not (part == "pretrain" and key in dropped):
            yield part, key, document


# --- the normalised-token cache -----------------------------------------------------------------

def _cache_paths(domain: str, part: str) -> tuple[Path, Path]:
    folder = runs_dir() / "cache" / "tokens"
    return folder / f"{domain}.{part}.txt", folder / f"{domain}.{part}.json"


def _cache_stamp(domain: str) -> dict:
    """What a cache file must have been built from: the split file's hash, the normaliser version and the
    pretrain part's evaluation-text filter (the hash of the keys it drops)."""
    dropped = "\n".join(sorted(pretrain_dropped(domain)))
    return {"split_sha256": split_sha256(domain), "normalisation": split_normalisation(get_domain(domain)),
            "pretrain_filter_sha256": hashlib.sha256(dropped.encode()).hexdigest()}


def token_file(domain: str, part: str) -> Path:
    """Path of the cached normalised text of a part (one sentence per line), built if missing/stale."""
    check_part(part)
    spec = get_domain(domain)
    if part == "pretrain" and spec.pretrain_from:
        return token_file(spec.pretrain_from, part)
    load_split(domain)  # a clear error when the split was never built
    text_path, info_path = _cache_paths(domain, part)
    stamp = _cache_stamp(domain)
    if not (text_path.is_file() and info_path.is_file()
            and {k: v for k, v in json.loads(info_path.read_text()).items() if k in stamp} == stamp):
        build_token_cache(domain)
    return text_path


def build_token_cache(domain: str) -> dict[str, dict]:
    """Normalise every part of ``domain`` in one pass over its corpora and write the token cache
    (atomically: temporary files, then os.replace). Returns the per-part info written beside them.

    Order: train/valid/test documents in their split order (the shuffled order, so an LM's contiguous
    batches mix labels and sources; PTB: the official order); pretrain in reader order (streamed).
    """
    spec = get_domain(domain)
    parts = [part for part in PARTS if not (part == "pretrain" and spec.pretrain_from)]
    split, stamp = load_split(domain), _cache_stamp(domain)
    folder = _cache_paths(domain, parts[0])[0].parent
    folder.mkdir(parents=True, exist_ok=True)
    handles, infos = {}, {}
    held: dict[str, dict[str, list[list[str]]]] = {part: {} for part in split.ids}  # part -> key -> sentences
    try:
        for part in parts:
            handles[part] = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, delete=False,
                                                        prefix=f".{domain}.{part}.", suffix=".tmp")
            infos[part] = {**stamp, "documents": 0, "sentences": 0, "tokens": 0}
        documents = _iter_parts(domain, set(parts))
        for part, key, document in tqdm(documents, desc=f"token cache {domain}", unit=" docs"):
            sentences = document_sentences(domain, document)
            infos[part]["documents"] += 1
            infos[part]["sentences"] += len(sentences)
            infos[part]["tokens"] += count_tokens(sentences)
            if part in held:
                held[part][key] = sentences
            else:
                handles[part].writelines(" ".join(sentence) + "\n" for sentence in sentences)
        for part, sentences_of in held.items():
            for key in split.ids[part]:
                handles[part].writelines(" ".join(sentence) + "\n" for sentence in sentences_of[key])
        for part in parts:
            handles[part].close()
            text_path, info_path = _cache_paths(domain, part)
            os.chmod(handles[part].name, 0o644)  # temporary files are created 0600
            os.replace(handles[part].name, text_path)
            atomic_write_text(info_path, json.dumps(infos[part], indent=1) + "\n")
    finally:
        for handle in handles.values():
            handle.close()
            if os.path.exists(handle.name):
                os.unlink(handle.name)
    return infos


def iter_split_sentences(domain: str, part: str) -> Iterator[list[str]]:
    """Stream the normalised sentences of a part from the token cache (built on first use)."""
    with open(token_file(domain, part), encoding="utf-8") as handle:
        for line in handle:
            yield line.split()


def split_tokens(domain: str, part: str) -> list[list[str]]:
    """All normalised sentences of a part, in memory (``Vocab.encode_sentences`` adds the ``<eos>``).
    Fine for train/valid/test (~1M tokens); for ``pretrain`` (up to ~20M tokens) stream with
    :func:`iter_split_sentences` or read :func:`token_file` instead."""
    return list(iter_split_sentences(domain, part))


def split_counts(domain: str, part: str) -> Counter[str]:
    """Word counts of a part (no ``<eos>``), streamed from the token cache."""
    counts: Counter[str] = Counter()
    for sentence in iter_split_sentences(domain, part):
        counts.update(sentence)
    return counts


# --- the shared base model's training stream ----------------------------------------------------

def base_training_documents(domains: Iterable[str] = ()) -> Iterator[tuple[str, str, Document]]:
    """The raw documents the shared base model may train on, as ``(domain, key, Document)``.

    The union of the pretrain parts of :data:`~lmstudy.data.base_manifest.BASE_DOMAINS` (wikipedia, books, reddit,
    imdb, news, irc; in that order, each in reader order: deterministic), minus every document that near-duplicates
    an evaluation text (:func:`~lmstudy.data.base_manifest.evaluation_shingles`: every domain's valid and test
    parts, WikiText-2 valid/test, LAMBADA dev/test, GUM and LitBank dev/test, PTB valid/test). Drop rule, with
    :data:`~lmstudy.data.base_manifest.BASE_DROP_FRACTION` = 10%: a pretrain document goes when it contains 10%
    or more of the distinct shingles of one evaluation document (a copy, an edited copy, a book chunk holding a
    LitBank excerpt), or when 10% or more of its own shingles occur in evaluation texts (pieces of several). 10%, not the leak test's 50%: an evaluation document must not be half in the stream even
    when its pieces are spread over several training documents. Which documents were dropped and why:
    :func:`~lmstudy.data.base_manifest.base_training_manifest`. Not shuffled: the consumer mixes domains as it
    needs.
    """
    for domain in domains or BASE_DOMAINS:  # one domain at a time: the base's data takes a share of each
        for _, key, document in _iter_parts(domain, {"pretrain"}):  # the manifest's drops left out there
            yield domain, key, document


__all__ = ["base_training_documents", "build_token_cache", "iter_split_sentences", "split_counts", "split_documents",
           "split_tokens", "token_file"]
