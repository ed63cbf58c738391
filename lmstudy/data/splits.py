"""Document-level train / valid / test / pretrain splits per domain, fixed once and committed.

Welch et al. (2020, appendix C.3) split each in-domain corpus by document: shuffle the documents,
then "add articles until we have just gone past the number of tokens" of each PTB-sized split; the
rest is the (disjoint, much larger) pretraining data for the embeddings. We do the same:

1. Read every document of the domain's corpora (``DOMAINS``), normalise it with
   :func:`lmstudy.text.normalise_ptb` and count its tokens, one ``<eos>`` per sentence included.
2. Drop what must not be split: for Wikipedia the articles whose title is a WikiText-2 valid/test
   article (the leakage guard, :func:`wikitext_eval_titles`), in every domain the exact duplicates
   (same text, whitespace aside, as a document with a smaller key: Reuters has ~2,000 "Blah blah
   blah." bodies, BBC ~100 repeated articles) and documents left empty by normalisation.
3. Shuffle the sorted document keys with ``random.Random(seed)``; walk them filling valid, then
   test, then train, each until its token count first reaches its target (:class:`SplitTargets`:
   PTB's valid 70,390 / test 78,669 / train 887,521). Everything left is ``pretrain``.
4. Save ``lmstudy/data/splits/<domain>.json``: seed, targets, the sources, the keys of train / valid /
   test, the dropped keys with the reason, and the token and document counts of all four parts.
   Pretrain is "every other kept document", so it is not listed.

A document key is ``"<corpus>:<doc_id>"`` (the ``news`` domain mixes two corpora). Two domains differ:

- ``ptb`` keeps its official split (sections 0-20 / 21-22 / 23-24, Mikolov's files) and its text is
  used verbatim: it is already PTB-normalised and UNK'd, and our Std perplexities must be on
  Mikolov's exact tokens. Its pretraining data is the ``news`` domain's pretraining split, as Welch
  et al. pretrained PTB embeddings on news (Gigaword). The JSON stores the official parts, no keys.
- ``books`` (LitBank novels) are cut into ~2,000-word chunks first (a novel is larger than the valid
  target), so chunks of one novel can fall into different splits.

Reading a split: :func:`load_split` (the JSON), :func:`split_documents` (streams the Documents of a
part), :func:`split_tokens` / :func:`iter_split_sentences` / :func:`split_counts` (normalised tokens). The
tokens come from a cache, ``runs_dir()/cache/tokens/<domain>.<part>.txt``, one sentence per line like
``ptb.train.txt``, written in one pass over the corpus the first time any part of the domain is asked
for (a few minutes for the largest domains) and rebuilt when the split file or the normalisation
version changes (recorded in a ``.json`` beside each file).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from lmstudy.data.documents import Document
from lmstudy.paths import runs_dir
from lmstudy.runs import atomic_write_text
from lmstudy.text import NORMALISATION_VERSION, count_tokens, normalise_ptb

SPLITS_DIR = Path(__file__).resolve().parent / "splits"
PARTS = ("train", "valid", "test", "pretrain")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class DomainSpec:
    """Where a domain's documents come from and how it is split.

    ``sources``: (corpus name, reader options) pairs. ``official_parts``: for a corpus with its own
    split, part -> (corpus, reader options); then nothing is shuffled. ``pretrain_from``: take the
    pretraining part from this other domain. ``verbatim``: the text is already PTB-normalised, use
    ``line.split()``. ``drop_wikitext_eval``: apply the WikiText-2 leakage guard.
    """

    sources: tuple[tuple[str, dict], ...] = ()
    official_parts: dict[str, tuple[str, dict]] = field(default_factory=dict)
    pretrain_from: str | None = None
    verbatim: bool = False
    drop_wikitext_eval: bool = False


DOMAINS: dict[str, DomainSpec] = {
    "ptb": DomainSpec(
        official_parts={part: ("ptb", {"split": part}) for part in ("train", "valid", "test")},
        pretrain_from="news",
        verbatim=True,
    ),
    "wikipedia": DomainSpec(sources=(("wikipedia", {}),), drop_wikitext_eval=True),
    "imdb": DomainSpec(sources=(("imdb", {}),)),  # train + test + unsup reviews; ratings in the labels
    "reddit": DomainSpec(sources=(("reddit", {}),)),
    "irc": DomainSpec(sources=(("irc", {}),)),
    "books": DomainSpec(sources=(("litbank", {"chunk_words": 2000}),)),
    "news": DomainSpec(sources=(("reuters21578", {}), ("bbc_news", {}))),
}


@dataclass(frozen=True)
class SplitTargets:
    """Token targets (``<eos>`` included) of the shuffled parts; defaults are PTB's split sizes."""

    valid: int = 70_390
    test: int = 78_669
    train: int = 887_521


@dataclass
class Split:
    """One domain's split, as saved in ``lmstudy/data/splits/<domain>.json``."""

    domain: str
    seed: int | None
    targets: dict[str, int]
    sources: list
    normalisation: str
    tokens: dict[str, int]       # part -> tokens incl. <eos>
    documents: dict[str, int]    # part -> number of documents
    ids: dict[str, list[str]]    # train/valid/test -> document keys (empty for official splits)
    dropped: dict[str, str]      # document key -> why it is in no part
    official_parts: dict[str, list] = field(default_factory=dict)
    pretrain_from: str | None = None
    format: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        self._part_of = {key: part for part, keys in self.ids.items() for key in keys}

    def part_of(self, key: str) -> str | None:
        """The part of a (shuffled-split) document key; None for a dropped document."""
        if key in self.dropped:
            return None
        return self._part_of.get(key, "pretrain")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Split:
        payload = json.loads(text)
        if payload.get("format") != FORMAT_VERSION:
            raise ValueError(f"split file format {payload.get('format')!r} is not {FORMAT_VERSION}: "
                             "rebuild it with lmstudy.data.splits.build_split")
        return cls(**payload)


# --- reading a domain ---------------------------------------------------------------------------

def document_key(corpus: str, document: Document) -> str:
    return f"{corpus}:{document.doc_id}"


def iter_domain_documents(domain: str, limit: int | None = None) -> Iterator[tuple[str, Document]]:
    """(key, Document) for every document of a shuffled-split domain's corpora, in reader order.
    ``limit``: at most that many documents per corpus (for tests)."""
    from lmstudy.data import iter_documents

    for corpus, options in get_domain(domain).sources:
        options = dict(options) if limit is None else {**options, "limit": limit}
        for document in iter_documents(corpus, **options):
            yield document_key(corpus, document), document


def document_sentences(domain: str, document: Document) -> list[list[str]]:
    """The normalised sentences of a document of ``domain`` (verbatim lines for PTB)."""
    if get_domain(domain).verbatim:
        return [line.split() for line in document.text.splitlines() if line.split()]
    return normalise_ptb(document.text)


def get_domain(domain: str) -> DomainSpec:
    if domain not in DOMAINS:
        raise KeyError(f"unknown domain {domain!r}; domains with splits: {', '.join(DOMAINS)}")
    return DOMAINS[domain]


# --- the leakage guard --------------------------------------------------------------------------

def _wikitext_title(title: str) -> str:
    """A WikiText heading (tokenised style: ``Tom @-@ Tom 's ( band )``) -> plain lower-case title."""
    title = title.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    title = re.sub(r"\s+([,.:;!?)'])", r"\1", title)
    title = re.sub(r"\(\s+", "(", title).replace(" 's", "'s")
    return title.strip().lower()


def wikitext_eval_titles() -> set[str]:
    """Lower-cased titles of the WikiText-2 valid and test articles (the recipe of MANIFEST.md).

    Test titles come from ``wiki.test.raw`` (the tokenised files mask many titles with ``<unk>``);
    valid titles from ``wikitext-2/valid.txt`` (masked ones cannot be matched: the manifest's content
    check found no valid article in our Wikipedia shards). "Typhoon Soudelor (2003)" is added: it
    shares a paragraph with the WT2 test article "2003 Pacific typhoon season".
    """
    from lmstudy.data.catalogue import corpus_path

    files = [corpus_path("wikitext-2") / "valid.txt", corpus_path("wikitext-2-raw") / "wiki.test.raw"]
    titles = {"typhoon soudelor (2003)"}
    heading = re.compile(r" = ([^=].*?) = \r?\n")  # top-level headings only: " = Title = "
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            for line in handle:
                match = heading.fullmatch(line)
                if match and "<unk>" not in match.group(1):
                    titles.add(_wikitext_title(match.group(1)))
    return titles


# --- building ------------------------------------------------------------------------------------

def assign_split(
    domain: str,
    documents: Iterable[tuple[str, Document]],
    seed: int = 0,
    targets: SplitTargets = SplitTargets(),
    drop_titles: Iterable[str] = (),
) -> Split:
    """Split ``documents`` ((key, Document) pairs of a shuffled-split domain), steps 1-3 of the module
    docstring. Pure: reads nothing else, writes nothing."""
    spec = get_domain(domain)
    drop_titles = {title.lower() for title in drop_titles}
    token_counts: dict[str, int] = {}
    dropped: dict[str, str] = {}
    digests: dict[str, bytes] = {}
    for key, document in tqdm(documents, desc=f"normalising {domain}", unit=" docs"):
        if key in token_counts or key in dropped:
            raise ValueError(f"document key {key!r} occurs twice in domain {domain!r}: ids must be unique")
        if document.title and document.title.lower() in drop_titles:
            dropped[key] = f"evaluation article: {document.title}"
            continue
        sentences = document_sentences(domain, document)
        if not sentences:
            dropped[key] = "empty after normalisation"
            continue
        token_counts[key] = count_tokens(sentences)
        # Duplicates by raw text (whitespace aside): normalised text would also merge templated
        # but different documents, e.g. Reuters' "shr N cts vs N cts net N vs N" earnings reports.
        digests[key] = hashlib.sha1(" ".join(document.text.split()).encode("utf-8")).digest()

    order = sorted(token_counts)  # reader order must not matter, only the seed
    kept_with_digest: dict[bytes, str] = {}
    for key in order:  # of identical documents keep the first key in sorted order
        if digests[key] in kept_with_digest:
            dropped[key] = f"duplicate of {kept_with_digest[digests[key]]}"
        else:
            kept_with_digest[digests[key]] = key
    order = [key for key in order if key not in dropped]
    random.Random(seed).shuffle(order)
    # Fill valid, then test, then train, each until its count first reaches its target.
    ids: dict[str, list[str]] = {"valid": [], "test": [], "train": []}
    tokens = dict.fromkeys(PARTS, 0)
    to_fill = list(ids)
    for key in order:
        while to_fill and tokens[to_fill[0]] >= getattr(targets, to_fill[0]):
            to_fill.pop(0)
        part = to_fill[0] if to_fill else "pretrain"
        if part != "pretrain":
            ids[part].append(key)
        tokens[part] += token_counts[key]
    unfilled = [name for name in ids if tokens[name] < getattr(targets, name)]
    if unfilled:
        raise ValueError(
            f"domain {domain!r} has only {sum(token_counts.values()):,} tokens: not enough for the "
            f"targets {asdict(targets)} (parts short: {', '.join(unfilled)}); lower the targets"
        )
    documents_per_part = {name: len(keys) for name, keys in ids.items()}
    documents_per_part["pretrain"] = len(order) - sum(documents_per_part.values())
    return Split(
        domain=domain, seed=seed, targets=asdict(targets), sources=[list(s) for s in spec.sources],
        normalisation=_normalisation(spec), tokens=tokens, documents=documents_per_part,
        ids={name: ids[name] for name in ("train", "valid", "test")}, dropped=dropped,
        pretrain_from=spec.pretrain_from,
    )


def _normalisation(spec: DomainSpec) -> str:
    if spec.verbatim:
        return "verbatim: text already PTB-normalised, sentences = lines"
    return f"lmstudy.text.normalise_ptb v{NORMALISATION_VERSION}"


def _official_split(domain: str) -> Split:
    """A domain with its own train/valid/test (PTB): count its parts, nothing to shuffle."""
    from lmstudy.data import iter_documents

    spec = get_domain(domain)
    tokens, documents = {}, {}
    for part, (corpus, options) in spec.official_parts.items():
        counted = [count_tokens(document_sentences(domain, doc)) for doc in iter_documents(corpus, **options)]
        tokens[part], documents[part] = sum(counted), len(counted)
    if spec.pretrain_from:  # filled in from the other domain's saved split
        source = load_split(spec.pretrain_from)
        tokens["pretrain"], documents["pretrain"] = source.tokens["pretrain"], source.documents["pretrain"]
    return Split(
        domain=domain, seed=None, targets={}, sources=[], normalisation=_normalisation(spec),
        tokens=tokens, documents=documents, ids={}, dropped={},
        official_parts={part: list(source) for part, source in spec.official_parts.items()},
        pretrain_from=spec.pretrain_from,
    )


def build_split(domain: str, seed: int = 0, targets: SplitTargets = SplitTargets(),
                limit: int | None = None, save: bool = True) -> Split:
    """Build ``domain``'s split from the corpora and (when ``save``) write ``splits/<domain>.json``.

    Normalises the whole domain once (minutes for Wikipedia/IMDB/Reddit). ``limit`` (documents per
    corpus) is for tests; a limited split is never saved over the committed file.
    """
    spec = get_domain(domain)
    if spec.official_parts:
        split = _official_split(domain)
    else:
        drop_titles = wikitext_eval_titles() if spec.drop_wikitext_eval else ()
        split = assign_split(domain, iter_domain_documents(domain, limit), seed, targets, drop_titles)
    if save and limit is None:
        atomic_write_text(split_path(domain), split.to_json())
    return split


def build_all_splits(seed: int = 0) -> dict[str, Split]:
    """Build every domain's split; ``news`` before ``ptb``, which takes its pretraining part."""
    order = sorted(DOMAINS, key=lambda name: name == "ptb")
    return {domain: build_split(domain, seed=seed) for domain in order}


# --- reading a saved split ----------------------------------------------------------------------

def split_path(domain: str) -> Path:
    return SPLITS_DIR / f"{domain}.json"


def load_split(domain: str) -> Split:
    """The committed split of ``domain``."""
    get_domain(domain)
    path = split_path(domain)
    if not path.is_file():
        raise FileNotFoundError(
            f"no split file {path}; build it with: python -c \"from lmstudy.data.splits import build_split; "
            f"build_split('{domain}')\""
        )
    return Split.from_json(path.read_text(encoding="utf-8"))


def _check_part(part: str) -> None:
    if part not in PARTS:
        raise ValueError(f"unknown split part {part!r}; parts are: {', '.join(PARTS)}")


def split_documents(domain: str, part: str, limit: int | None = None) -> Iterator[Document]:
    """Stream the Documents of one part (train/valid/test/pretrain) of ``domain``'s committed split.

    ``limit``: stop after that many documents. Shuffled-split domains read the whole corpus (the
    part's documents are spread through it); use the token cache for repeated access.
    """
    _check_part(part)
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
    for key, document in iter_domain_documents(domain):
        part = split.part_of(key)
        if part in parts:
            yield part, key, document


# --- the normalised-token cache -----------------------------------------------------------------

def _cache_paths(domain: str, part: str) -> tuple[Path, Path]:
    folder = runs_dir() / "cache" / "tokens"
    return folder / f"{domain}.{part}.txt", folder / f"{domain}.{part}.json"


def _cache_stamp(domain: str) -> dict:
    """What a cache file must have been built from: the split file's hash and the normaliser version."""
    split_bytes = split_path(domain).read_bytes() if split_path(domain).is_file() else b""
    return {"split_sha256": hashlib.sha256(split_bytes).hexdigest(),
            "normalisation": _normalisation(get_domain(domain))}


def token_file(domain: str, part: str) -> Path:
    """Path of the cached normalised text of a part (one sentence per line), built if missing/stale."""
    _check_part(part)
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


__all__ = ["DOMAINS", "PARTS", "DomainSpec", "Split", "SplitTargets", "assign_split", "build_all_splits",
           "build_split", "build_token_cache", "document_key", "document_sentences", "iter_domain_documents",
           "iter_split_sentences", "load_split", "split_counts", "split_documents", "split_path",
           "split_tokens", "token_file", "wikitext_eval_titles"]
