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

Reading a split: :func:`load_split` (the JSON). Its parts' documents and normalised tokens (cached), with the
pretrain part's evaluation-text filter, are read through :mod:`lmstudy.data.parts`.

Shingles: :func:`domain_shingles` (every document's shingle set, cached in ``runs_dir()/cache/shingles/`` and
written by :func:`build_split`) and :func:`part_shingles`. What the shared base model may not train on (the
pretrain documents that near-duplicate an evaluation text) is :mod:`lmstudy.data.base_manifest`, computed from
them; ``tests/test_leakage.py`` checks both.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

import numpy as np

from lmstudy.data.dedup import (
    DEDUP_VERSION, LINK_FRACTION, MAX_DOCUMENT_FREQUENCY, SHINGLE_WORDS, ShingleHasher, ShingleSets,
    connected_components, near_duplicate_pairs, shingle_words, units_as_edges,
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
        normalisation=split_normalisation(spec), tokens=tokens, documents=documents_per_part,
        ids={name: ids[name] for name in ("train", "valid", "test")}, dropped=dropped,
        pretrain_from=spec.pretrain_from, dedup=dedup,
    )


def split_normalisation(spec: DomainSpec) -> str:
    """How a domain's text is normalised, as its split file (and its token cache) record it."""
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
        domain=domain, seed=None, targets={}, sources=[], normalisation=split_normalisation(spec),
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
        save_shingles(domain, table.shingles, _domain_shingle_stamp(domain))
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


def check_part(part: str) -> None:
    """A ``ValueError`` naming the parts when ``part`` is not one of :data:`PARTS`."""
    if part not in PARTS:
        raise ValueError(f"unknown split part {part!r}; parts are: {', '.join(PARTS)}")


def split_sha256(domain: str) -> str:
    """The hash of ``domain``'s split file (of no bytes when there is none): what every cache built from the split
    is stamped with."""
    split_bytes = split_path(domain).read_bytes() if split_path(domain).is_file() else b""
    return hashlib.sha256(split_bytes).hexdigest()


# --- shingles of whole domains ------------------------------------------------------------------

SHUFFLED_DOMAINS = tuple(name for name, spec in DOMAINS.items() if not spec.official_parts)


def _shingle_cache_path(name: str) -> Path:
    return runs_dir() / "cache" / "shingles" / f"{name}.npz"


def save_shingles(name: str, sets: ShingleSets, stamp: dict) -> None:
    """Write ``sets`` with ``stamp`` (what they were computed from) atomically, as
    ``runs_dir()/cache/shingles/<name>.npz``."""
    path = _shingle_cache_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{name}.", suffix=".tmp", delete=False) as handle:
        np.savez(handle, keys=np.array(sets.keys, dtype=str), hashes=sets.hashes, offsets=sets.offsets,
                 stamp=np.array(json.dumps(stamp, sort_keys=True)))
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)


def load_shingles(name: str, stamp: dict) -> ShingleSets | None:
    """The cached sets of ``name`` if they were computed from ``stamp``, else None."""
    path = _shingle_cache_path(name)
    if not path.is_file():
        return None
    with np.load(path) as cached:
        if str(cached["stamp"]) != json.dumps(stamp, sort_keys=True):
            return None
        return ShingleSets(cached["keys"].tolist(), cached["hashes"], cached["offsets"])


def _domain_shingle_stamp(domain: str) -> dict:
    return {"split_sha256": split_sha256(domain), "dedup": DEDUP_VERSION}


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
    sets = load_shingles(domain, stamp)
    if sets is None:
        hasher = ShingleHasher()
        keys, arrays = [], []
        for key, document in tqdm(iter_domain_documents(domain), desc=f"shingles {domain}", unit=" docs"):
            keys.append(key)
            arrays.append(hasher(document.text))
        sets = ShingleSets.from_arrays(keys, arrays)
        save_shingles(domain, sets, stamp)
    return sets


def part_shingles(domain: str, parts: Iterable[str]) -> ShingleSets:
    """The shingle sets of the documents of ``domain`` in ``parts`` (reader order)."""
    parts = set(parts)
    for part in parts:
        check_part(part)
    split, sets = load_split(domain), domain_shingles(domain)
    return sets.select(i for i, key in enumerate(sets.keys) if split.part_of(key) in parts)


__all__ = ["DOMAINS", "PARTS", "SHUFFLED_DOMAINS", "DomainSpec", "DomainTable", "Split", "SplitTargets",
           "assign_split", "build_all_splits", "build_split", "check_part", "document_key", "document_sentences",
           "domain_shingles", "get_domain", "iter_domain_documents", "load_shingles", "load_split", "part_shingles",
           "read_domain", "save_shingles", "split_normalisation", "split_path", "split_sha256", "split_table",
           "user_domain", "wikitext_eval_titles"]
