"""CTRL control codes: which codes exist, where their documents come from, and how a document is
written after its code.

Keskar et al. (2019) prepend a *domain* control code (``Wikipedia``, ``Books``, ``Reviews``, one
code per subreddit, ...) to every training sequence, and some domains carry *secondary* codes in
the text itself (their Table 7): ``Reviews Rating: 5.0``, ``Links Title: ... Text: ...``,
``Translation English : ... ; German : ...``, ``Questions Q: ...``. Our reading, on our corpora:

- A domain code is one special token of the tokenizer, written ``<|NAME|>`` (``<|Wikipedia|>``,
  ``<|r/worldnews|>``): ``train_bpe`` matches special tokens anywhere in the text, so the bare word
  ``Wikipedia`` could not be a special token without breaking every sentence that mentions it.
  Users name codes without the brackets (``--code Reviews``).
- Secondary codes are ordinary text at the start of the document, learnt by the model like any
  other text: ``Rating: 4.0\\n<review>``, ``Title: <title>\\nText: <body>``, ``Q: <question>``,
  ``English: <en> ; German: <de>``.
- Domains and their documents (held-out documents come from the committed splits of
  ``lmstudy.data.splits`` where the domain has one, else from the corpus's official split):

  ============ ============================ ============================= ===========================
  code         documents                    secondary code                held-out part
  ============ ============================ ============================= ===========================
  Wikipedia    ``wikipedia`` split          --                            split valid / test
  Books        ``books`` split (LitBank,    --                            split valid / test
               ~2,000-word chunks)
  Reviews      ``imdb`` split               ``Rating: r`` (r = 1.0..5.0)  split valid / test
  News         ``news`` split (Reuters,     ``Title: ... Text: ...``      split valid / test
               BBC)
  IRC          ``irc`` split (Ubuntu chat)  --                            split valid / test
  Questions    nltk ``qc`` (TREC)           ``Q: ...``                    qc ``train`` / ``test``
                                                                          (valid = last 10% of train)
  Translation  Multi30k en-de pairs         ``English: ... ; German: ...`` ``val`` / ``test_2016_flickr``
  r/<sub>      ``reddit`` split, one code   ``Title: <root text> Text:    split valid + test
               per subreddit (train +       <replies>``                   (for both: see below)
               pretrain)
  Links        news, wikipedia, reddit      a URL from the metadata       split valid / test
               splits in turn               (see "Link codes" below)
  ============ ============================ ============================= ===========================

- IMDB ratings (1-4 and 7-10 in the corpus) map to five levels as ``ceil(rating / 2)``: 1-2 -> 1.0,
  3-4 -> 2.0, (5-6 -> 3.0, absent from IMDB), 7-8 -> 4.0, 9-10 -> 5.0. Unrated (unsup) reviews are
  written without a ``Rating:`` line.
- Reddit's ``extra`` file is not a subreddit and gets no code. Our copy has 13 subreddits
  (:data:`SUBREDDITS`); the paper had many more (and ``r/AskReddit``-style codes).
- Subreddits are small in the shared reddit split, which puts most threads in its ``pretrain`` part (the
  Welch study's pretraining text, which this study does not otherwise use): r/compsci has 30 train and no
  valid threads. So a subreddit code trains on the split's ``train`` + ``pretrain`` threads, and its
  held-out part is ``valid`` + ``test`` together (3 to 160 threads; the ``valid`` and ``test`` parts of a
  subreddit code are the same documents). Training and held-out threads stay disjoint.
- A Reddit document is a conversation tree whose first line is its root (a submission title or a
  comment): that line is the ``Title:``, the replies are the ``Text:``.
- **Link codes** (the paper's ``Links`` domain, its Table 3): where our corpora carry the metadata, a
  document is also written after a URL built from it, under one more code, ``Links``
  (:func:`link_url`; the line after the URL is the document's text, as in the paper):

  ============ ===============================================================
  corpus       URL (``<slug>``: the title's first 8 words, lower case, ``-``)
  ============ ===============================================================
  Reuters      ``https://www.reuters.com/<yyyy>/<mm>/<dd>/<first topic or news>/<slug>``
  BBC News     ``https://news.bbc.co.uk/<category>/<slug>`` (our copy has no dates)
  Wikipedia    ``https://en.wikipedia.org/wiki/<Title_with_underscores>``
  Reddit       ``https://www.reddit.com/r/<subreddit>/comments/<slug of the root line>``
  ============ ===============================================================

  ``Links`` draws its documents from the ``news``, ``wikipedia`` and ``reddit`` splits in turn (one of
  each, round robin, so a ``limit`` gets all three), reddit's ``extra`` file excluded (no subreddit).
  The same documents also train under their own domain codes: the link code adds a way to *ask* for
  them by path, date and category, which the Table 3 probe (``lmstudy.ctrl.probes.link_probe``) varies.
- **Code-mixing** (the paper's Table 5: ``Diet English : I lost 10 kgs! ; German :``): a composite code
  ``DOMAIN TEMPLATE`` may put any domain's secondary code (:data:`SECONDARY_FORMS`) after any domain
  code, e.g. ``r/Sports English:`` (prompt ``The match was great ; German:``) or ``Wikipedia Q:``.
  :func:`check_secondary` accepts a domain's own form and every other domain's template; a text of no
  known form is refused. Nothing in training pairs a code with another domain's template: whether the
  model keeps both is measured (``lmstudy.ctrl.probes.code_mixing_table``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lmstudy.data.documents import Document

CODE_PREFIX, CODE_SUFFIX = "<|", "|>"
PARTS = ("train", "valid", "test")

SUBREDDITS = ("worldnews", "News", "movies", "gaming", "television", "books", "gadgets", "Sports",
              "programming", "history", "compsci", "machinelearning", "weather")


@dataclass(frozen=True)
class ControlCode:
    """One domain code: its name (what users type), its source and how its documents are written."""

    name: str
    source: str  # "split:<domain>", "qc", "multi30k", "links"
    secondary: str = ""  # "" | "rating" | "title_text" | "question" | "translation" | "link"
    subreddit: str | None = None  # reddit codes: the Document label to keep

    @property
    def token(self) -> str:
        """The special token of this code in the tokenizer, e.g. ``<|Reviews|>``."""
        return code_token(self.name)


def code_token(name: str) -> str:
    """``Reviews`` -> ``<|Reviews|>``: the special token of a code name."""
    return f"{CODE_PREFIX}{name}{CODE_SUFFIX}"


def code_name(token: str) -> str:
    """``<|Reviews|>`` -> ``Reviews`` (a bare name is returned as is)."""
    if token.startswith(CODE_PREFIX) and token.endswith(CODE_SUFFIX):
        return token[len(CODE_PREFIX):-len(CODE_SUFFIX)]
    return token


CODES: dict[str, ControlCode] = {
    code.name: code
    for code in [
        ControlCode("Wikipedia", "split:wikipedia"),
        ControlCode("Books", "split:books"),
        ControlCode("Reviews", "split:imdb", secondary="rating"),
        ControlCode("News", "split:news", secondary="title_text"),
        ControlCode("IRC", "split:irc"),
        ControlCode("Questions", "qc", secondary="question"),
        ControlCode("Translation", "multi30k", secondary="translation"),
        *[ControlCode(f"r/{sub}", "split:reddit", secondary="title_text", subreddit=sub) for sub in SUBREDDITS],
        ControlCode("Links", "links", secondary="link"),
    ]
}

# The form of each secondary code (what follows the code token in ``format_text``), as typed after a
# code name in a composite code, and how an error message describes it.
SECONDARY_FORMS = {
    "rating": (re.compile(r"Rating: [1-5]\.0"), "`Rating: 1.0` to `Rating: 5.0`"),
    "title_text": (re.compile(r"(Title: \S.*|Text:)"), "`Title: <a title>` or `Text:`"),
    "question": (re.compile(r"Q:( \S.*)?"), "`Q:`"),
    "translation": (re.compile(r"English: \S.*|English:"), "`English: <a sentence> ; German:`"),
    "link": (re.compile(r"https?://\S+"), "`https://<a URL>`"),
}


def get_code(name: str, known: Iterable[str] | None = None) -> str:
    """Check a code name (``Reviews`` or ``<|Reviews|>``) against ``known`` (default: all CODES)."""
    name = code_name(name.strip())
    known = list(CODES) if known is None else [code_name(k) for k in known]
    if name not in known:
        raise ValueError(f"unknown control code {name!r}; known codes: {', '.join(known)}")
    return name


def secondary_kind(secondary: str) -> str | None:
    """The kind of a typed secondary code (a key of :data:`SECONDARY_FORMS`), None when it has no known form."""
    return next((kind for kind, (pattern, _) in SECONDARY_FORMS.items() if pattern.fullmatch(secondary)), None)


def check_secondary(name: str, secondary: str) -> str:
    """Check the secondary code typed after code ``name``: its own domain's form, or (code-mixing, module
    docstring) another domain's template. Returns the kind; ``ValueError`` saying what to write otherwise.
    Codes outside :data:`CODES` (a user's own, ``ctrl add-codes``) take any text."""
    kind = secondary_kind(secondary)
    code = CODES.get(name)
    if code is None or kind is not None:
        return kind or ""
    others = "; ".join(f"{described}" for k, (_, described) in SECONDARY_FORMS.items() if k != code.secondary)
    if code.secondary:
        own = SECONDARY_FORMS[code.secondary][1]
        raise ValueError(f"after {name} write {own} (or, to mix codes, another domain's template: {others})")
    raise ValueError(f"{name} takes no secondary code of its own; to mix codes write another domain's template "
                     f"after it: {others}")


def template_owners(kind: str) -> list[str]:
    """The domain codes whose own secondary code is ``kind`` (subreddits excluded: their ``Title:`` is
    the reddit form of News's): ``translation`` -> ``[Translation]``."""
    return [code.name for code in CODES.values() if code.secondary == kind and code.subreddit is None]


# --------------------------------------------------------------------------------------------
# link codes


def _slug(text: str, words: int = 8) -> str:
    """``"Bahia Cocoa Review!"`` -> ``bahia-cocoa-review``: a URL path segment of a title's first words."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words]) or "untitled"


MONTHS = {name: index for index, name in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}


def link_url(document: Document) -> str | None:
    """The URL of a document from its metadata (table in the module docstring); None when the corpus
    carries none (reddit's ``extra`` file, other domains)."""
    title = (document.title or document.text.partition("\n")[0]).strip()
    if document.domain == "wikipedia" and document.title:
        return f"https://en.wikipedia.org/wiki/{document.title.strip().replace(' ', '_')}"
    if document.domain == "news" and "date" in document.meta:  # Reuters: "26-FEB-1987 15:01:01.79"
        match = re.match(r"\s*(\d{1,2})-([A-Z]{3})-(\d{4})", document.meta["date"] or "")
        topics = document.meta.get("topics") or ["news"]
        if match and match.group(2) in MONTHS:
            day, month, year = int(match.group(1)), MONTHS[match.group(2)], match.group(3)
            return f"https://www.reuters.com/{year}/{month:02d}/{day:02d}/{topics[0]}/{_slug(title)}"
        return f"https://www.reuters.com/{topics[0]}/{_slug(title)}"
    if document.domain == "news" and "topic" in document.meta:  # BBC
        return f"https://news.bbc.co.uk/{document.meta['topic']}/{_slug(title)}"
    if document.domain == "reddit" and document.label in SUBREDDITS:
        return f"https://www.reddit.com/r/{document.label}/comments/{_slug(title)}"
    return None


LINK_DOMAINS = ("news", "wikipedia", "reddit")


def rating_level(rating: int) -> float:
    """IMDB's 1..10 stars -> the paper's five levels 1.0..5.0 (``ceil(rating / 2)``)."""
    if not 1 <= rating <= 10:
        raise ValueError(f"an IMDB rating is 1..10, got {rating}")
    return float(math.ceil(rating / 2))


def format_text(code: ControlCode, document: Document) -> str:
    """The text of ``document`` with its secondary code (what follows the domain code token)."""
    text = document.text.strip()
    if code.secondary == "rating":
        rating = int(document.meta.get("rating", 0) or 0)
        return f"Rating: {rating_level(rating):.1f}\n{text}" if rating else text
    if code.secondary == "title_text":
        if document.title:  # news articles have a title of their own
            return f"Title: {document.title.strip()}\nText: {text}"
        if code.subreddit is None:  # an untitled news article (some Reuters bodies)
            return f"Text: {text}"
        title, _, rest = text.partition("\n")  # reddit: the root of the conversation tree
        return f"Title: {title}\nText: {rest}" if rest else f"Title: {title}\nText:"
    if code.secondary == "question":
        return f"Q: {text}"
    if code.secondary == "translation":
        return text  # already "English: ... ; German: ..." (see _translation_pairs)
    if code.secondary == "link":
        url = link_url(document)
        if url is None:
            raise ValueError(f"document {document.doc_id!r} ({document.domain}) has no metadata to build a link from")
        return f"{url}\n{text}"
    return text


def format_document(code: ControlCode, document: Document) -> str:
    """``"<|CODE|>text"``: a document as one string. No space after the code token: the model is
    trained on ``[code id] + ids(text)``, and encoding this string gives exactly those ids."""
    return f"{code.token}{format_text(code, document)}"


# --------------------------------------------------------------------------------------------
# documents of a code, per part


def _translation_pairs(split: str, limit: int | None) -> Iterator[Document]:
    from lmstudy.data import iter_documents

    english = {d.meta["line"]: d.text for d in iter_documents("multi30k", split=split, languages="en", limit=limit)}
    for document in iter_documents("multi30k", split=split, languages="de", limit=limit):
        line = document.meta["line"]
        if line in english:
            yield Document(f"{split}.en-de-{line:05d}", f"English: {english[line]} ; German: {document.text}",
                           "translation", "en-de", None, {"split": split, "line": line})


def _qc_questions(part: str, limit: int | None) -> Iterator[Document]:
    from lmstudy.data import iter_documents

    if part == "test":
        questions = [d for d in iter_documents("nltk_data", corpora="qc") if d.meta["split"] == "test"]
    else:
        # qc has train (5,452) and test (500) only: its last 10% of train is our valid part.
        train = [d for d in iter_documents("nltk_data", corpora="qc") if d.meta["split"] == "train"]
        cut = len(train) - len(train) // 10
        questions = train[:cut] if part == "train" else train[cut:]
    yield from questions[:limit] if limit is not None else questions


MULTI30K_PART = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
SUBREDDIT_PARTS = {"train": ("train", "pretrain"), "valid": ("valid", "test"), "test": ("valid", "test")}


def _link_documents(part: str, limit: int | None) -> Iterator[Document]:
    """The ``Links`` code's documents: news, wikipedia and reddit in turn (those with a URL)."""
    from lmstudy.data.parts import split_documents

    streams = [(d for d in split_documents(domain, part) if link_url(d) is not None) for domain in LINK_DOMAINS]
    count = 0
    while streams and (limit is None or count < limit):
        for stream in list(streams):
            document = next(stream, None)
            if document is None:
                streams.remove(stream)
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            yield document


def code_documents(name: str, part: str, limit: int | None = None) -> Iterator[Document]:
    """The documents of control code ``name`` in ``part`` (train / valid / test), at most ``limit``."""
    from lmstudy.data.parts import split_documents

    code = CODES[get_code(name)]
    if part not in PARTS:
        raise ValueError(f"part {part!r} is not one of {PARTS}")
    if code.source == "qc":
        yield from _qc_questions(part, limit)
        return
    if code.source == "multi30k":
        yield from _translation_pairs(MULTI30K_PART[part], limit)
        return
    if code.source == "links":
        yield from _link_documents(part, limit)
        return
    domain = code.source.split(":", 1)[1]
    if code.subreddit is None:
        yield from split_documents(domain, part, limit=limit)
        return
    # One subreddit of the reddit split (parts merged as the module docstring says): the split streams
    # every subreddit, so filter.
    count = 0
    for split_part in SUBREDDIT_PARTS[part]:
        for document in split_documents(domain, split_part):
            if limit is not None and count >= limit:
                return
            if document.label == code.subreddit:
                count += 1
                yield document


def code_texts(name: str, part: str, limit: int | None = None) -> list[str]:
    """The formatted texts (secondary code included, domain code token excluded) of a code's part."""
    code = CODES[get_code(name)]
    return [format_text(code, document) for document in code_documents(name, part, limit)]


# --- a control-code model's codes: the tokens and the record every such folder carries ---------------------------

CODES_FILE = "control_codes.json"  # in every control-code model folder: the codes and the training mixture


def write_code_record(path: Path, mixture: dict[str, float]) -> None:
    """Write ``control_codes.json`` into the model folder ``path``: the codes (the mixture's keys) and the mixture."""
    (path / CODES_FILE).write_text(json.dumps({"codes": list(mixture), "mixture": mixture}, indent=2) + "\n",
                                   encoding="utf-8")


def with_codes(model, tokenizer, codes: list[str]):
    """``(model, tokenizer)`` with the code tokens added to the tokenizer as special tokens and the embedding
    matrix grown to match (changes both in place; the model in train mode)."""
    tokenizer.add_special_tokens({"additional_special_tokens": [code_token(name) for name in codes]})
    model.resize_token_embeddings(len(tokenizer))
    return model.train(), tokenizer


__all__ = ["CODES", "CODES_FILE", "ControlCode", "SECONDARY_FORMS", "SUBREDDITS", "check_secondary", "code_documents", "code_name",
           "code_texts", "code_token", "format_document", "format_text", "get_code", "link_url", "rating_level",
           "secondary_kind", "template_owners", "with_codes", "write_code_record"]
