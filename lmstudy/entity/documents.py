"""The entity study's documents: OntoGUM coreference (GUM's official train/dev/test; the 18 reddit documents are
masked in the release and left out) plus LitBank (the reader's fixed 80/10/10 document split), encoded by
:func:`lmstudy.entity.data.encode_coref_document` with the base's tokenizer; the NER probe's and Table 4's
documents are read from the same splits."""

from __future__ import annotations

import dataclasses
import functools

from lmstudy.data.readers.coref import CorefDocument
from lmstudy.entity.config import EntityStudyConfig
from lmstudy.entity.data import EntityDocument, encode_coref_document

SPLITS = {"train": "train", "valid": "dev", "test": "test"}  # our names -> the readers' split names


@functools.lru_cache(maxsize=None)
def coref_documents(corpus: str) -> tuple[CorefDocument, ...]:
    """Every document of a coreference corpus, read once per process (each reader streams its archive)."""
    from lmstudy.data.catalogue import corpus_path

    if corpus == "gum":
        from lmstudy.data.readers.gum import read_gum_coref

        return tuple(read_gum_coref(corpus_path("gum")))
    if corpus == "litbank":
        from lmstudy.data.readers.litbank import read_litbank_coref

        return tuple(read_litbank_coref(corpus_path("litbank")))
    raise ValueError(f"coreference corpus {corpus!r} is not one of gum, litbank")


def coref_split(corpus: str, split: str, limit: int = 0) -> list[CorefDocument]:
    """The first ``limit`` (0: all) documents of one split (train / valid / test) of a corpus."""
    docs = [doc for doc in coref_documents(corpus) if doc.split == SPLITS[split]]
    return docs[:limit] if limit else docs


_ENCODED: dict[tuple, list[EntityDocument]] = {}


def encoded_split(corpus: str, split: str, limit: int, tokenizer) -> list[EntityDocument]:
    """``coref_split`` encoded with ``tokenizer`` (memoised per process: several stages read the same ids)."""
    key = (corpus, split, limit, tokenizer.name_or_path, len(tokenizer), id(tokenizer))
    if key not in _ENCODED:
        _ENCODED[key] = [encode_coref_document(doc, tokenizer) for doc in coref_split(corpus, split, limit)]
    return _ENCODED[key]


def ner_split(config: EntityStudyConfig, split: str, tokenizer) -> tuple[list[CorefDocument], list[EntityDocument]]:
    """The NER probe's documents of one split, raw and encoded: the first ``ner_train_docs`` (train) or
    ``ner_eval_docs`` (valid, test) of ``config.ner_corpus``, each cut after its last sentence within its first
    ``config.max_doc_tokens`` sub-tokens when that is set (whole sentences: every tagged sentence is complete).
    Table 4 and t-SNE read whole documents: their measures need an entity's several mentions, and the first
    mention of GUM's first test document is its 262nd word."""
    limit = config.ner_train_docs if split == "train" else config.ner_eval_docs
    corpus = config.ner_corpus
    coref, encoded = coref_split(corpus, split, limit), encoded_split(corpus, split, limit, tokenizer)
    if not config.max_doc_tokens:
        return coref, encoded
    cut = [doc.first_sentences(words_within(enc, config.max_doc_tokens)) for doc, enc in zip(coref, encoded)]
    return cut, [encode_coref_document(doc, tokenizer) for doc in cut]


def words_within(doc: EntityDocument, n_subtokens: int) -> int:
    """How many words of ``doc`` lie wholly within its first ``n_subtokens`` sub-tokens (word indices only grow;
    the first word with a sub-token at or after the cut is the first one outside)."""
    later = [word for word in doc.word_index[n_subtokens:] if word >= 0]
    return later[0] if later else max(doc.word_index, default=-1) + 1


def study_documents(config: EntityStudyConfig, tokenizer) -> dict[str, list[EntityDocument]]:
    """Fine-tuning documents per split: every corpus of ``config.corpora``, concatenated; each cut to its first
    ``config.max_doc_tokens`` sub-tokens when that is set."""
    limits = {"train": config.train_docs, "valid": config.eval_docs, "test": config.eval_docs}
    cut = slice(config.max_doc_tokens or None)
    return {split: [dataclasses.replace(doc, input_ids=doc.input_ids[cut], entity_ids=doc.entity_ids[cut],
                                        word_index=doc.word_index[cut])
                    for corpus in config.corpora for doc in encoded_split(corpus, split, limit, tokenizer)]
            for split, limit in limits.items()}


def without_entities(docs: list[EntityDocument]) -> list[EntityDocument]:
    """The same documents with every entity id null (entity information removed at inference)."""
    return [dataclasses.replace(doc, entity_ids=[0] * len(doc.entity_ids)) for doc in docs]
