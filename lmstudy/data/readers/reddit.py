"""Reader of the Reddit statement-response corpus (``reddit/reddit_corpus_json.tar.xz``).

Source: leahrnh/reddit_corpus. Format: ``reddit_corpus/<subreddit>_<YYYY-MM-DD>.json`` (260 files:
13 subreddits + one ``extra`` file, Feb-Apr 2015; the AskReddit files are not in our copy), each a
JSON list of pairs
``{"docID", "qSentId", "question", "aSentId", "answer", "corpus": "reddit"}``. The collector walked
the top 25 submissions of a subreddit-day: the submission title (or a comment) is a ``question``
and up to 3 of its replies are ``answer``s. Facts checked on the data that shape this reader:

- ``docID`` is the *subreddit's* id (``t5_...``, one value per file), not a thread id;
- ids are sequential in collection order and restart in every file; a reply that itself has
  replies is re-emitted as a question with the next id (``question[n] == answer[n - 1]``);
- so texts repeat: 393,449 pairs hold 450,804 distinct texts; ~2.5% of a file's texts also occur
  in an earlier file of the same subreddit (a submission still on top the next day).

Document unit: **a conversation tree** -- a root text (a submission title, or a comment whose
parent pair was not saved) with every reply below it, found by following ``aSentId -> qSentId``
links and the ``question[n] == answer[n - 1]`` re-emission rule (ids and exact text must both
match; a looser text-only match would join unrelated "Thank you!" threads). A full submission thread
cannot be rebuilt: the collector kept only 3 replies per text, so many top-level comments have no
saved link to their title. Texts are in collection (id) order, each distinct text once; a text
already yielded earlier in the same subreddit is dropped (so a re-collected thread does not land in
two splits), and a tree with nothing new is skipped. HTML entities of Reddit's markdown
(``&gt;``, ``&amp;``) are unescaped; the markdown itself is kept.

``doc_id = "<file stem>/<root id>"`` (e.g. ``books_2015-03-15/5378``), ``label`` = subreddit from
the file name (``News``, ``worldnews``, ..., ``extra``), ``meta = {"file", "date", "messages"}``,
domain ``reddit``. ``subreddits=`` restricts to some (case-insensitive; a name not in the archive
is an error, raised once the archive has been read). Order: archive order of the
files, trees by root id within a file.

Broken files: 26 files fail ``json.load`` -- one has a stray comma after ``[`` (the bug the corpus
README describes), 25 have pairs written back to back without a comma (``}{``). We parse every file
with ``json.JSONDecoder.raw_decode`` one pair at a time, skipping ``[``, ``]``, commas and whitespace
between pairs, which reads all 260 files completely. Should a file hold something else, the reader
skips to the next ``{"docID"`` and logs a warning with the number of characters it could not read
(:func:`parse_pairs` returns that count).
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import iter_tar, join_lines, reader

log = logging.getLogger(__name__)

_FILE = re.compile(r"(?:^|/)(([A-Za-z]+)_(\d{4}-\d{2}-\d{2}))\.json$")
_BETWEEN_PAIRS = "[],\n\r\t "
_PAIR_START = '{"docID"'


def parse_pairs(text: str) -> tuple[list[dict], int]:
    """The pair records of one corpus file, and how many characters could not be parsed (0 = all read).

    Tolerates what the corpus's files contain: a stray comma after ``[``, and records written
    back to back (``}{``) with no comma between them.
    """
    decoder = json.JSONDecoder()
    pairs: list[dict] = []
    unreadable = 0
    position, end = 0, len(text)
    while True:
        while position < end and text[position] in _BETWEEN_PAIRS:
            position += 1
        if position >= end:
            return pairs, unreadable
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            resume = text.find(_PAIR_START, position + 1)
            resume = end if resume < 0 else resume
            unreadable += resume - position
            position = resume
            continue
        if isinstance(record, dict) and {"qSentId", "question", "aSentId", "answer"} <= record.keys():
            pairs.append(record)
        else:
            unreadable += len(json.dumps(record))


def conversation_trees(pairs: list[dict]) -> list[tuple[int, list[str]]]:
    """Group a file's pairs into conversation trees: ``(root id, texts in id order)``, by root id."""
    text_of: dict[int, str] = {}
    parent: dict[int, int] = {}
    for pair in pairs:
        question, answer = int(pair["qSentId"]), int(pair["aSentId"])
        text_of.setdefault(question, pair["question"])
        text_of.setdefault(answer, pair["answer"])
        parent.setdefault(answer, question)
    for sent_id, text in text_of.items():
        # A reply with replies of its own is re-emitted as a question with the next id.
        previous = sent_id - 1
        if sent_id not in parent and previous in parent and text_of.get(previous) == text:
            parent[sent_id] = previous

    def root(sent_id: int) -> int:
        seen = set()
        while sent_id in parent and sent_id not in seen:  # `seen`: guard against a cycle in bad data
            seen.add(sent_id)
            sent_id = parent[sent_id]
        return sent_id

    trees: dict[int, list[str]] = defaultdict(list)
    for sent_id in sorted(text_of):
        trees[root(sent_id)].append(text_of[sent_id])
    return sorted(trees.items())


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()


@reader
def read_reddit(root: Path, subreddits: str | Iterable[str] | None = None) -> Iterator[Document]:
    """Reddit conversation trees, one document each; label = subreddit."""
    if isinstance(subreddits, str):
        subreddits = (subreddits,)
    wanted = None if subreddits is None else {name.lower() for name in subreddits}
    seen: dict[str, set[bytes]] = defaultdict(set)  # subreddit -> digests of texts already yielded
    in_archive: set[str] = set()
    damaged = 0
    for name, data in iter_tar(root / "reddit_corpus_json.tar.xz", ".json"):
        match = _FILE.search(name)
        if match is None:
            continue
        stem, subreddit, date = match.groups()
        in_archive.add(subreddit)
        if wanted is not None and subreddit.lower() not in wanted:
            continue
        pairs, unreadable = parse_pairs(data.decode("utf-8"))
        if unreadable:
            damaged += 1
            log.warning("reddit: %s: %d characters could not be parsed and were skipped", name, unreadable)
        for root_id, texts in conversation_trees(pairs):
            messages = []
            for text in texts:
                text = join_lines(html.unescape(text).split("\n"))
                digest = _digest(text)
                if text and digest not in seen[subreddit]:
                    seen[subreddit].add(digest)
                    messages.append(text)
            if messages:
                yield Document(f"{stem}/{root_id}", "\n".join(messages), domain="reddit", label=subreddit,
                               meta={"file": stem, "date": date, "messages": len(messages)})
    if damaged:
        log.warning("reddit: %d files had unreadable parts (see the warnings above)", damaged)
    unknown = (wanted or set()) - {name.lower() for name in in_archive}
    if unknown:
        raise ValueError(f"subreddits={sorted(unknown)} not in the corpus; it has: {', '.join(sorted(in_archive))}")
