"""Document-level train / valid / test / pretrain splits per domain, fixed once and committed.

Welch et al. (2020, appendix C.3) split each in-domain corpus by document: shuffle the documents,
then "add articles until we have just gone past the number of tokens" of each PTB-sized split; the
rest is the (disjoint, much larger) pretraining data for the embeddings. We do the same, with
near-duplicates kept together (split format 2, :data:`FORMAT_VERSION`):

1. Read every document of the domain's corpora (``DOMAINS``), normalise it with
   :func:`lmstudy.text.normalise_ptb` and count its tokens, one ``<eos>`` per sentence included;
   take the 13-word shingles of its raw text (:mod:`lmstudy.data.dedup`).
2. Drop what must not be split: for Wikipedia the articles whose title is a WikiText-2 valid/test
   article (the leakage guard, :func:`wikitext_eval_titles`), in every domain the exact duplicates
   (the same words, lower-cased ``\\w+`` tokens of the raw text, as a document with a smaller key: so
   case, quotes and punctuation aside; Reuters has ~2,000 "Blah blah blah." bodies, BBC ~100
   repeated articles) and documents left empty by normalisation. Every dropped key is recorded with
   its reason.
3. Cluster the kept documents: two documents are linked when they share at least 20% of the
   smaller one's distinct shingles (:func:`lmstudy.data.dedup.near_duplicate_pairs`: edited copies,
   quoting posts, templated stubs), and in a domain with ``unit_meta`` the documents of one unit are
   linked too (IRC: the 50-message windows of one log: its conversations run across windows);
   clusters are the connected components. The split file records the parameters and cluster
   statistics (``dedup``).
4. Shuffle the clusters (each listing its keys in sorted order; clusters in the order of their first
   key) with ``random.Random(seed)``; walk them filling valid, then test, then train, each until
   its token count first reaches its target (:class:`SplitTargets`: PTB's valid 70,390 / test
   78,669 / train 887,521). A cluster goes whole into one part; one larger than half the target of
   the part being filled (:data:`MAX_CLUSTER_FRACTION`: Wikipedia's templated stubs, 53 IRC logs
   chained through short last windows that are one third bot factoids) goes to pretrain instead.
   Everything left is ``pretrain``. With no near-duplicates (books) this is exactly the v1 shuffle
   of documents.
5. Save ``lmstudy/data/splits/<domain>.json``: format, seed, targets, the sources, the keys of train /
   valid / test, the dropped keys with the reason, the dedup parameters and cluster statistics, and
   the token and document counts of all four parts. Pretrain is "every other kept document", so it
   is not listed. Files of an older format are rejected with the command that rebuilds them;
   results computed on v1 splits are labelled "split v1" on the study pages (docs/).

A document key is ``"<corpus>:<doc_id>"`` (the ``news`` domain mixes two corpora). Two domains differ:

- ``ptb`` keeps its official split (sections 0-20 / 21-22 / 23-24, Mikolov's files) and its text is
  used verbatim: it is already PTB-normalised and UNK'd, and our Std perplexities must be on
  Mikolov's exact tokens. Its pretraining data is the ``news`` domain's pretraining split, as Welch
  et al. pretrained PTB embeddings on news (Gigaword). The JSON stores the official parts, no keys.
- ``books`` (LitBank novels) are cut into ~2,000-word chunks first (a novel is larger than the valid
  target), so chunks of one novel can fall into different splits (they share no text).

User corpora (``python -m lmstudy data add NAME PATH``, :mod:`lmstudy.data.add_corpus`) are split by the same
steps 1-4 (no leakage guard, no units; targets PTB's sizes unless ``--train-tokens`` scales them) and then
behave as a domain everywhere here: :func:`get_domain` gives them :func:`user_domain`'s spec and
:func:`split_path` their own ``split.json`` (:mod:`lmstudy.data.user_corpus`). They are not in ``DOMAINS``,
so the leak test, the evaluation texts and the base model's stream never see them.

Reading a split: :func:`load_split` (the JSON), :func:`split_documents` (streams the Documents of a
part), :func:`split_tokens` / :func:`iter_split_sentences` / :func:`split_counts` (normalised tokens). The
tokens come from a cache, ``runs_dir()/cache/tokens/<domain>.<part>.txt``, one sentence per line like
``ptb.train.txt``, written in one pass over the corpus the first time any part of the domain is asked
for (a few minutes for the largest domains) and rebuilt when the split file or the normalisation
version changes (recorded in a ``.json`` beside each file).

Shingles and the base model's stream: :func:`domain_shingles` (every document's shingle set, cached
in ``runs_dir()/cache/shingles/`` and written by :func:`build_split`), :func:`evaluation_shingles`
(every evaluation text), :func:`base_training_documents` (the pretrain parts minus whatever
near-duplicates an evaluation text; the shared base model trains on it) and
:func:`base_training_manifest` (what it drops and why). ``tests/test_leakage.py`` checks both.
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

import numpy as np

from lmstudy.data.dedup import (
    DEDUP_VERSION, LINK_FRACTION, MAX_DOCUMENT_FREQUENCY, SHINGLE_WORDS, ShingleHasher, ShingleSets,
    connected_components, near_duplicate_pairs, shared_shingle_counts, shingle_words, units_as_edges,
)
from lmstudy.data.documents import Document
from lmstudy.data.user_corpus import is_registered, registered_corpora, user_split_path
from lmstudy.paths import runs_dir
from lmstudy.runs import atomic_write_text
from lmstudy.text import NORMALISATION_VERSION, count_tokens, normalise_ptb

SPLITS_DIR = Path(__file__).resolve().parent / "splits"
PARTS = ("train", "valid", "test", "pretrain")
FORMAT_VERSION = 2  # 2: near-duplicate clusters, IRC by log (1: exact duplicates only)


def check_split_format(format: int) -> None:
    """Refuse a run config that names another split format than the files this lmstudy reads: a run's config
    carries the format its data came from, so that runs trained on format-1 splits (archived before the
    near-duplicate rule) never read back as format-2 ones."""
    if format != FORMAT_VERSION:
        raise ValueError(f"a run on split format {format} cannot be trained by this lmstudy, whose split files are "
                         f"format {FORMAT_VERSION}: its archived metrics stay readable (runs.list_runs)")


# An evaluation or train part takes a cluster only if it is at most this fraction of the part's target:
# a larger one (Wikipedia's templated stubs, thousands of documents) would overshoot it; it goes to pretrain.
MAX_CLUSTER_FRACTION = 0.5


@dataclass(frozen=True)
class DomainSpec:
    """Where a domain's documents come from and how it is split.

    ``sources``: (corpus name, reader options) pairs. ``official_parts``: for a corpus with its own
    split, part -> (corpus, reader options); then nothing is shuffled. ``pretrain_from``: take the
    pretraining part from this other domain. ``verbatim``: the text is already PTB-normalised, use
    ``line.split()``. ``drop_wikitext_eval``: apply the WikiText-2 leakage guard. ``unit_meta``:
    ``Document.meta`` fields whose values name a unit that stays in one part (IRC: the log).
    """

    sources: tuple[tuple[str, dict], ...] = ()
    official_parts: dict[str, tuple[str, dict]] = field(default_factory=dict)
    pretrain_from: str | None = None
    verbatim: bool = False
    drop_wikitext_eval: bool = False
    unit_meta: tuple[str, ...] = ()


DOMAINS: dict[str, DomainSpec] = {
    "ptb": DomainSpec(
        official_parts={part: ("ptb", {"split": part}) for part in ("train", "valid", "test")},
        pretrain_from="news",
        verbatim=True,
    ),
    "wikipedia": DomainSpec(sources=(("wikipedia", {}),), drop_wikitext_eval=True),
    "imdb": DomainSpec(sources=(("imdb", {}),)),  # train + test + unsup reviews; ratings in the labels
    "reddit": DomainSpec(sources=(("reddit", {}),)),
    "irc": DomainSpec(sources=(("irc", {}),), unit_meta=("part", "file")),  # 50-message windows, by log
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
    dedup: dict = field(default_factory=dict)  # near-duplicate parameters and cluster statistics
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
            raise ValueError(
                f"split file of domain {payload.get('domain')!r} has format {payload.get('format')!r}; this "
                f"lmstudy reads format {FORMAT_VERSION} only (v2: near-duplicate clusters kept in one part, IRC "
                "split by log). Rebuild it with: python -c \"from lmstudy.data.splits import build_all_splits; "
                "build_all_splits()\""
            )
        return cls(**payload)


# --- reading a domain ---------------------------------------------------------------------------

def document_key(corpus: str, document: Document) -> str:
    """A document's key, unique across corpora: ``corpus:doc_id``."""
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
    return _sentences(get_domain(domain), document)


def _sentences(spec: DomainSpec, document: Document) -> list[list[str]]:
    if spec.verbatim:
        return [line.split() for line in document.text.splitlines() if line.split()]
    return normalise_ptb(document.text)


def user_domain(name: str) -> DomainSpec:
    """The ``DomainSpec`` of a user corpus (``python -m lmstudy data add``): its one source is the registered
    corpus itself, split like the bundled domains (no official parts, no leakage guard, no units)."""
    return DomainSpec(sources=((name, {}),))


def get_domain(domain: str) -> DomainSpec:
    """The ``DomainSpec`` of ``domain`` (a bundled domain or a registered user corpus); a ``KeyError`` naming
    both otherwise."""
    if domain in DOMAINS:
        return DOMAINS[domain]
    if is_registered(domain):
        return user_domain(domain)
    raise KeyError(f"unknown domain {domain!r}; domains with splits: {', '.join(DOMAINS)}; registered user "
                   f"corpora: {', '.join(registered_corpora()) or 'none'} (add one with: python -m lmstudy data "
                   "add NAME PATH)")


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

@dataclass
class DomainTable:
    """What splitting needs of each document of a domain (:func:`read_domain`), keyed by document key."""

    tokens: dict[str, int]          # kept documents -> tokens incl. <eos>
    digests: dict[str, bytes]       # kept documents -> digest of their words (exact duplicates)
    units: dict[str, str | None]    # kept documents -> unit name (``DomainSpec.unit_meta``), None if none
    dropped: dict[str, str]         # document key -> why it is in no part
    shingles: ShingleSets           # every document read, in reader order (for the shingle cache)


def _unit(spec: DomainSpec, key: str, document: Document) -> str | None:
    if not spec.unit_meta:
        return None
    missing = [name for name in spec.unit_meta if name not in document.meta]
    if missing:
        raise ValueError(f"document {key!r} has no meta field(s) {missing}: its domain keeps units "
                         f"{spec.unit_meta} together")
    return "/".join(str(document.meta[name]) for name in spec.unit_meta)


def read_domain(domain: str, documents: Iterable[tuple[str, Document]], drop_titles: Iterable[str] = (),
                spec: DomainSpec | None = None) -> DomainTable:
    """Step 1-2 of the module docstring for ``documents`` ((key, Document) pairs): normalise and count
    tokens, shingle the raw text, drop the evaluation articles and the empty documents. ``spec``: the
    domain's spec when it is not registered yet (``data add`` splits before it registers), else looked up."""
    spec = spec or get_domain(domain)
    drop_titles = {title.lower() for title in drop_titles}
    hasher = ShingleHasher()
    table = DomainTable({}, {}, {}, {}, ShingleSets.from_arrays([], []))
    keys, shingles = [], []
    for key, document in tqdm(documents, desc=f"normalising {domain}", unit=" docs"):
        if key in table.tokens or key in table.dropped:
            raise ValueError(f"document key {key!r} occurs twice in domain {domain!r}: ids must be unique")
        words = shingle_words(document.text)
        keys.append(key)
        shingles.append(hasher.of_segments([words]))
        if document.title and document.title.lower() in drop_titles:
            table.dropped[key] = f"evaluation article: {document.title}"
            continue
        sentences = _sentences(spec, document)
        if not sentences:
            table.dropped[key] = "empty after normalisation"
            continue
        table.tokens[key] = count_tokens(sentences)
        # Duplicates by words (lower-cased \w+ of the raw text): case, quotes and punctuation aside.
        # Not by normalised text, which would also merge templated but different documents: numbers
        # become N, e.g. Reuters' "shr N cts vs N cts net N vs N" earnings reports.
        table.digests[key] = hashlib.sha1(" ".join(words).encode("utf-8")).digest()
        table.units[key] = _unit(spec, key, document)
    table.shingles = ShingleSets.from_arrays(keys, shingles)
    return table


def assign_split(
    domain: str,
    documents: Iterable[tuple[str, Document]],
    seed: int = 0,
    targets: SplitTargets = SplitTargets(),
    drop_titles: Iterable[str] = (),
) -> Split:
    """Split ``documents`` ((key, Document) pairs of a shuffled-split domain), steps 1-4 of the module
    docstring. Pure: reads nothing else, writes nothing."""
    return split_table(domain, read_domain(domain, documents, drop_titles), seed, targets)


def _clusters(table: DomainTable, keys: list[str]) -> tuple[list[list[str]], dict]:
    """The near-duplicate clusters of ``keys`` (sorted) and the statistics recorded in the split file.
    A cluster lists its keys in sorted order; clusters come in the order of their first key."""
    index = {key: i for i, key in enumerate(table.shingles.keys)}
    sets = table.shingles.select(index[key] for key in keys)
    i, j, _ = near_duplicate_pairs(sets)
    unit_i, unit_j = units_as_edges([table.units[key] for key in keys])
    labels = connected_components(len(keys), [(i, j), (unit_i, unit_j)])
    groups: dict[int, list[str]] = {}
    for key, label in zip(keys, labels):
        groups.setdefault(int(label), []).append(key)
    clusters = list(groups.values())
    shared = [cluster for cluster in clusters if len(cluster) > 1]
    largest = sorted(shared, key=lambda c: (-len(c), c[0]))[:5]
    stats = {
        "near_duplicate_links": len(i),
        "documents": len(keys),
        "clusters": len(clusters),
        "clusters_of_several": len(shared),
        "documents_in_clusters_of_several": sum(len(cluster) for cluster in shared),
        "largest_clusters": [{"first": c[0], "documents": len(c), "tokens": sum(table.tokens[k] for k in c)}
                             for c in largest],
    }
    return clusters, stats


def split_table(domain: str, table: DomainTable, seed: int = 0, targets: SplitTargets = SplitTargets(),
                spec: DomainSpec | None = None) -> Split:
    """Steps 2-4 of the module docstring on a :func:`read_domain` table (``spec``: as for :func:`read_domain`)."""
    spec = spec or get_domain(domain)
    dropped = dict(table.dropped)
    order = sorted(table.tokens)  # reader order must not matter, only the seed
    kept_with_digest: dict[bytes, str] = {}
    for key in order:  # of identical documents keep the first key in sorted order
        if table.digests[key] in kept_with_digest:
            dropped[key] = f"duplicate of {kept_with_digest[table.digests[key]]}"
        else:
            kept_with_digest[table.digests[key]] = key
    order = [key for key in order if key not in dropped]
    clusters, stats = _clusters(table, order)
    random.Random(seed).shuffle(clusters)
    # Fill valid, then test, then train, cluster by cluster, each until its count first reaches its target.
    ids: dict[str, list[str]] = {"valid": [], "test": [], "train": []}
    tokens = dict.fromkeys(PARTS, 0)
    documents_per_part = dict.fromkeys(PARTS, 0)
    to_fill = list(ids)
    oversized = 0
    for cluster in clusters:
        size = sum(table.tokens[key] for key in cluster)
        while to_fill and tokens[to_fill[0]] >= getattr(targets, to_fill[0]):
            to_fill.pop(0)
        part = to_fill[0] if to_fill else "pretrain"
        if part != "pretrain" and size > MAX_CLUSTER_FRACTION * getattr(targets, part):
            part, oversized = "pretrain", oversized + 1
        if part != "pretrain":
            ids[part].extend(cluster)
        tokens[part] += size
        documents_per_part[part] += len(cluster)
    unfilled = [name for name in ids if tokens[name] < getattr(targets, name)]
    if unfilled:
        raise ValueError(
            f"domain {domain!r} has only {sum(table.tokens.values()):,} tokens: not enough for the "
            f"targets {asdict(targets)} (parts short: {', '.join(unfilled)}); lower the targets"
        )
    dedup = {
        "version": DEDUP_VERSION,
        "words": "lower-cased \\w+ tokens of the raw text",
        "shingle_words": SHINGLE_WORDS,
        "link_fraction": LINK_FRACTION,
        "link_rule": "shared distinct shingles >= link_fraction x those of the smaller document",
        "max_document_frequency": MAX_DOCUMENT_FREQUENCY,
        "units": list(spec.unit_meta),
        "max_cluster_fraction": MAX_CLUSTER_FRACTION,
        "oversized_clusters_to_pretrain": oversized,
        **stats,
    }
    return Split(
        domain=domain, seed=seed, targets=asdict(targets), sources=[list(s) for s in spec.sources],
        normalisation=_normalisation(spec), tokens=tokens, documents=documents_per_part,
        ids={name: ids[name] for name in ("train", "valid", "test")}, dropped=dropped,
        pretrain_from=spec.pretrain_from, dedup=dedup,
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
        if save and limit is None:
            atomic_write_text(split_path(domain), split.to_json())
        return split
    drop_titles = wikitext_eval_titles() if spec.drop_wikitext_eval else ()
    table = read_domain(domain, iter_domain_documents(domain, limit), drop_titles)
    split = split_table(domain, table, seed, targets)
    if save and limit is None:
        atomic_write_text(split_path(domain), split.to_json())
        # the leak test and the base stream reuse them
        _save_shingles(domain, table.shingles, _domain_shingle_stamp(domain))
    return split


def build_all_splits(seed: int = 0) -> dict[str, Split]:
    """Build every domain's split; ``news`` before ``ptb``, which takes its pretraining part."""
    order = sorted(DOMAINS, key=lambda name: name == "ptb")
    return {domain: build_split(domain, seed=seed) for domain in order}


# --- reading a saved split ----------------------------------------------------------------------

def split_path(domain: str) -> Path:
    """The committed split file of ``domain`` (``splits/<domain>.json``); a registered user corpus's own
    ``split.json`` (:mod:`lmstudy.data.user_corpus`)."""
    if domain not in DOMAINS and is_registered(domain):
        return user_split_path(domain)
    return SPLITS_DIR / f"{domain}.json"


def load_split(domain: str) -> Split:
    """The committed split of ``domain`` (a user corpus: the split ``data add`` wrote)."""
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


def _split_sha256(domain: str) -> str:
    split_bytes = split_path(domain).read_bytes() if split_path(domain).is_file() else b""
    return hashlib.sha256(split_bytes).hexdigest()


def _cache_stamp(domain: str) -> dict:
    """What a cache file must have been built from: the split file's hash, the normaliser version and the
    pretrain part's evaluation-text filter (the hash of the keys it drops)."""
    dropped = "\n".join(sorted(pretrain_dropped(domain)))
    return {"split_sha256": _split_sha256(domain), "normalisation": _normalisation(get_domain(domain)),
            "pretrain_filter_sha256": hashlib.sha256(dropped.encode()).hexdigest()}


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


# --- shingles of whole domains and of the evaluation texts ---------------------------------------

SHUFFLED_DOMAINS = tuple(name for name, spec in DOMAINS.items() if not spec.official_parts)
EVALUATION_PARTS = ("valid", "test")


def _shingle_cache_path(name: str) -> Path:
    return runs_dir() / "cache" / "shingles" / f"{name}.npz"


def _save_shingles(name: str, sets: ShingleSets, stamp: dict) -> None:
    """Write ``sets`` with ``stamp`` (what they were computed from) atomically."""
    path = _shingle_cache_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{name}.", suffix=".tmp", delete=False) as handle:
        np.savez(handle, keys=np.array(sets.keys, dtype=str), hashes=sets.hashes, offsets=sets.offsets,
                 stamp=np.array(json.dumps(stamp, sort_keys=True)))
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)


def _load_shingles(name: str, stamp: dict) -> ShingleSets | None:
    """The cached sets of ``name`` if they were computed from ``stamp``, else None."""
    path = _shingle_cache_path(name)
    if not path.is_file():
        return None
    with np.load(path) as cached:
        if str(cached["stamp"]) != json.dumps(stamp, sort_keys=True):
            return None
        return ShingleSets(cached["keys"].tolist(), cached["hashes"], cached["offsets"])


def _domain_shingle_stamp(domain: str) -> dict:
    return {"split_sha256": _split_sha256(domain), "dedup": DEDUP_VERSION}


def domain_shingles(domain: str) -> ShingleSets:
    """The shingle sets (:mod:`lmstudy.data.dedup`) of every document a shuffled-split domain's readers
    yield (dropped ones included), keyed and ordered as :func:`iter_domain_documents`. Cached in
    ``runs_dir()/cache/shingles/<domain>.npz`` (written by :func:`build_split` too), rebuilt when
    the split file or :data:`~lmstudy.data.dedup.DEDUP_VERSION` changes: about a minute for the
    largest domains."""
    if domain not in SHUFFLED_DOMAINS:
        raise ValueError(f"domain {domain!r} has an official split; shingled domains: {', '.join(SHUFFLED_DOMAINS)}")
    load_split(domain)  # a clear error when the split was never built
    stamp = _domain_shingle_stamp(domain)
    sets = _load_shingles(domain, stamp)
    if sets is None:
        hasher = ShingleHasher()
        keys, arrays = [], []
        for key, document in tqdm(iter_domain_documents(domain), desc=f"shingles {domain}", unit=" docs"):
            keys.append(key)
            arrays.append(hasher(document.text))
        sets = ShingleSets.from_arrays(keys, arrays)
        _save_shingles(domain, sets, stamp)
    return sets


def part_shingles(domain: str, parts: Iterable[str]) -> ShingleSets:
    """The shingle sets of the documents of ``domain`` in ``parts`` (reader order)."""
    parts = set(parts)
    for part in parts:
        _check_part(part)
    split, sets = load_split(domain), domain_shingles(domain)
    return sets.select(i for i, key in enumerate(sets.keys) if split.part_of(key) in parts)


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
    external = _load_shingles("evaluation", stamp)
    if external is None:
        hasher = ShingleHasher()
        keys, arrays = [], []
        for key, text, unk in tqdm(_external_evaluation_texts(), desc="shingles evaluation", unit=" docs"):
            keys.append(key)
            arrays.append(hasher(text, unk))
        external = ShingleSets.from_arrays(keys, arrays)
        _save_shingles("evaluation", external, stamp)
    collections = [external]
    for domain in SHUFFLED_DOMAINS:
        for part in EVALUATION_PARTS:
            sets = part_shingles(domain, [part])
            collections.append(ShingleSets([f"{domain} {part}|{key}" for key in sets.keys], sets.hashes, sets.offsets))
    return ShingleSets.concatenate(collections)


# --- the shared base model's training stream ----------------------------------------------------

BASE_DOMAINS = ("wikipedia", "books", "reddit", "imdb", "news", "irc")
BASE_DROP_FRACTION = 0.1


def _base_manifest_stamp() -> dict:
    from lmstudy.data.catalogue import CHECKSUMS

    corpora = {corpus for _, corpus, _, _ in EXTERNAL_EVALUATION}
    return {
        "split_sha256": {domain: _split_sha256(domain) for domain in SHUFFLED_DOMAINS},
        "evaluation_files": {path: digest for path, digest in CHECKSUMS.items() if path.split("/")[0] in corpora},
        "dedup": DEDUP_VERSION, "drop_fraction": BASE_DROP_FRACTION, "domains": list(BASE_DOMAINS),
    }


def base_training_manifest() -> dict:
    """Which pretrain documents near-duplicate an evaluation text, and why: left out of every pretrain part's
    readers (:func:`pretrain_dropped`; the shared base's stream, :func:`base_training_documents`, among them). Returns ``{"stamp", "rule", "domains": {domain: {"pretrain":
    documents, "kept": documents, "dropped": {key: reason}, "dropped_by_set": {evaluation set: n},
    "dropped_by_rule": {rule: n}}}}``.

    Cached in ``runs_dir()/cache/base_training/manifest.json``, keyed by the split files' hashes, the
    evaluation corpora's checksums and the dedup parameters: the second call is free. The first
    needs every domain's shingles (:func:`domain_shingles`: minutes when they are not cached).
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
    (:func:`base_training_manifest`'s rule): left out of the pretrain part for every reader (:func:`_iter_parts`).
    Empty for a user corpus (no evaluation texts are checked against it) and for a domain whose pretrain part
    is another's (PTB reads news's, filtered there)."""
    if domain not in BASE_DOMAINS:
        if domain in SHUFFLED_DOMAINS:
            raise ValueError(f"domain {domain!r} has a pretrain part but is not in BASE_DOMAINS: the "
                             "evaluation-text filter would not cover it")
        return {}
    return base_training_manifest()["domains"][domain]["dropped"]


def base_training_documents(domains: Iterable[str] = ()) -> Iterator[tuple[str, str, Document]]:
    """The raw documents the shared base model may train on, as ``(domain, key, Document)``.

    The union of the pretrain parts of :data:`BASE_DOMAINS` (wikipedia, books, reddit, imdb, news, irc;
    in that order, each in reader order: deterministic), minus every document that near-duplicates
    an evaluation text (:func:`evaluation_shingles`: every domain's valid and test parts, WikiText-2
    valid/test, LAMBADA dev/test, GUM and LitBank dev/test, PTB valid/test). Drop rule, with
    :data:`BASE_DROP_FRACTION` = 10%: a pretrain document goes when it contains 10% or more of the
    distinct shingles of one evaluation document (a copy, an edited copy, a book chunk holding a
    LitBank excerpt), or when 10% or more of its own shingles occur in evaluation texts (pieces of
    several). 10%, not the leak test's 50%: an evaluation document must not be half in the stream even
    when its pieces are spread over several training documents. Which documents were dropped and why:
    :func:`base_training_manifest`. Not shuffled: the consumer mixes domains as it needs.
    """
    for domain in domains or BASE_DOMAINS:  # one domain at a time: the base's data takes a share of each
        for _, key, document in _iter_parts(domain, {"pretrain"}):  # the manifest's drops left out there
            yield domain, key, document


__all__ = ["BASE_DOMAINS", "DOMAINS", "PARTS", "SHUFFLED_DOMAINS", "DomainSpec", "DomainTable", "Split",
           "SplitTargets", "assign_split", "base_training_documents", "base_training_manifest",
           "build_all_splits", "build_split", "build_token_cache", "document_key", "document_sentences",
           "domain_shingles", "evaluation_shingles", "iter_domain_documents", "iter_split_sentences",
           "load_split", "part_shingles", "pretrain_dropped", "read_domain", "split_counts", "split_documents", "split_path",
           "split_table", "split_tokens", "token_file", "user_domain", "wikitext_eval_titles"]
