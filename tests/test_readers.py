"""Tests of the corpus readers (lmstudy.data.readers).

The first half runs without data (parsers on hand-made input); the second reads slices of the
real corpora (``require_corpus``) -- ``limit=`` keeps each test to a few seconds at most.
"""

from __future__ import annotations

import logging
import re
import tarfile
import time
from pathlib import Path

import pytest

from conftest import require_corpus
from lmstudy.data.documents import Document
from lmstudy.data.readers import DOMAIN_OF, NLTK_DOMAIN_OF, READERS, read_gum_coref, read_litbank_coref
from lmstudy.data.readers.common import join_lines, unwrap_paragraphs
from lmstudy.data.readers.coref import CorefDocument, Mention, coref_spans, iob_spans
from lmstudy.data.readers.imdb import _REVIEW, review_text
from lmstudy.data.readers.irc import conversations, parse_log
from lmstudy.data.readers.litbank import chunk_paragraphs, litbank_split
from lmstudy.data.readers.news import reuters_text
from lmstudy.data.readers.reddit import conversation_trees, parse_pairs


def corpus_root(name: str) -> Path:
    require_corpus(name)
    from lmstudy.data.catalogue import corpus_path

    return corpus_path(name)


def valid_iob(tags: list[str]) -> bool:
    """Every I-X follows a B-X or I-X of the same type."""
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return False
        if not (tag == "O" or tag[:2] in ("B-", "I-")):
            return False
        previous = tag
    return True


# --- parsers, on hand-made input ---------------------------------------------------------------

def test_text_convention_helpers():
    assert join_lines(["  a b ", "", "\t", "c"]) == "a b\nc"
    wrapped = "CHAPTER I\n\nIt was a dark\nand stormy night.\n  \nThe end\n"
    assert unwrap_paragraphs(wrapped) == "CHAPTER I\nIt was a dark and stormy night.\nThe end"


def test_reddit_parse_pairs_recovers_the_broken_files():
    pair = '{"docID": "t5_x", "qSentId": %d, "question": "%s", "aSentId": %d, "answer": "%s", "corpus": "reddit"}'
    first, second = pair % (1, "Title", 2, "Reply {with} braces"), pair % (3, "Reply {with} braces", 4, "Deeper")
    for text in (f"[{first},{second}]", f"[,{first},{second}]", f"[{first}{second}]"):
        pairs, unreadable = parse_pairs(text)
        assert [p["aSentId"] for p in pairs] == [2, 4] and unreadable == 0
    pairs, unreadable = parse_pairs(f"[{first}, garbage!! {second}]")
    assert [p["aSentId"] for p in pairs] == [2, 4] and unreadable == len("garbage!! ")


def test_reddit_conversation_trees_follow_replies_and_re_emitted_questions():
    pairs = [
        {"qSentId": 10, "question": "Title", "aSentId": 11, "answer": "A"},
        {"qSentId": 10, "question": "Title", "aSentId": 13, "answer": "B"},
        {"qSentId": 14, "question": "B", "aSentId": 15, "answer": "reply to B"},  # B re-emitted as id 14
        {"qSentId": 20, "question": "B", "aSentId": 21, "answer": "same text, unrelated root"},
    ]
    trees = conversation_trees(pairs)
    assert trees == [(10, ["Title", "A", "B", "B", "reply to B"]), (20, ["B", "same text, unrelated root"])]


def test_coref_spans_parse_every_bracket_style():
    # LitBank style (pipes), OntoGUM style (bare ids), GUM style (type-id-identity labels).
    assert coref_spans(["(2|(1)", "_", "2)"]) == [(0, 1, "1"), (0, 3, "2")]
    assert coref_spans(["(5(1)", "_", "5)"]) == [(0, 1, "1"), (0, 3, "5")]
    gum = ["(person-10-Charles_Bolden(organization-1-NASA)", "person-10-Charles_Bolden)"]
    assert coref_spans(gum) == [(0, 1, "organization-1-NASA"), (0, 2, "person-10-Charles_Bolden")]


def test_coref_spans_drop_unmatched_brackets_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert coref_spans(["(1", "(2)", "3)"], "doc X") == [(1, 2, "2")]
    assert "doc X" in caplog.text


def test_token_clusters_resolve_nested_mentions_by_rule():
    # "her sister saw the bank": [[her]_1 sister]_2 ... [the bank]_3
    doc = CorefDocument(
        "toy", None, ["her", "sister", "saw", "the", "bank"], [0], None,
        mentions=[Mention(0, 2, 2, "PER"), Mention(0, 1, 1, "PER"), Mention(3, 5, 3, "LOC")],
        entities=[Mention(0, 2, None, "PER"), Mention(0, 1, None, "PER"), Mention(3, 5, None, "LOC")],
    )
    assert doc.token_clusters("innermost") == [1, 2, None, 3, 3]
    assert doc.token_clusters("outermost") == [2, 2, None, 3, 3]
    assert doc.entity_iob() == ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]
    assert doc.clusters()[2] == [Mention(0, 2, 2, "PER")]
    with pytest.raises(ValueError, match="rule"):
        doc.token_clusters("widest")


def test_first_sentences_cut_after_the_last_whole_sentence_with_what_lies_inside():
    # sentences [0, 3), [3, 5), [5, 7); a mention crossing the cut and one after it go, nested ones stay
    doc = CorefDocument(
        "toy", "test", ["Ann", "saw", "Bob", "He", "left", "She", "stayed"], [0, 3, 5], list("ABCDEFG"),
        mentions=[Mention(0, 1, 1), Mention(2, 3, 2), Mention(3, 4, 2), Mention(4, 6, 3), Mention(5, 6, 1)],
        entities=[Mention(0, 1, None, "PER"), Mention(5, 6, None, "PER")],
    )
    cut = doc.first_sentences(6)  # the third sentence ends at 7: outside
    assert (cut.tokens, cut.sentence_starts, cut.pos) == (doc.tokens[:5], [0, 3], list("ABCDE"))
    assert cut.mentions == doc.mentions[:3] and cut.entities == doc.entities[:1]
    assert cut.entity_iob() == ["B-PER", "O", "O", "O", "O"]
    assert doc.first_sentences(1).tokens == doc.tokens[:3]  # the first sentence at least
    assert doc.first_sentences(100).tokens == doc.tokens and len(doc.tokens) == 7  # the original is untouched


def test_iob_spans_read_one_layer():
    spans = iob_spans(["B-PER", "I-PER", "O", "I-LOC", "B-GPE", "B-GPE"])
    expected = [(0, 2, "PER"), (3, 4, "LOC"), (4, 5, "GPE"), (5, 6, "GPE")]
    assert [(s.start, s.end, s.entity_type) for s in spans] == expected


def test_irc_log_parsing_and_gold_conversations():
    log = "\n".join([
        "[09:56] <ann> hello all",
        "=== bob [bob@host]  has joined #ubuntu",
        "[09:57] <bob> ann: hi, how do I mount a disk?",
        "[09:57] <cat> unrelated question",
        "[09:58] <ann> bob: sudo mount /dev/sdb1 /mnt",
        "rust 2018-05-29 [21:20:37] <dan> new-domains\x03 line",
    ])
    messages = parse_log(log)
    assert [(m.line, m.speaker) for m in messages] == [(0, "ann"), (2, "bob"), (3, "cat"), (4, "ann"), (5, "dan")]
    assert messages[-1].text == "new-domains line"
    groups = conversations(messages, "0 2 -\n2 4 -\n3 3 -\n1 1 -\n")
    assert [[m.line for m in group] for group in groups] == [[0, 2, 4], [3]]


def test_reuters_text_unescapes_unwraps_and_drops_the_signature():
    sgml = "Showers continued &lt;ABC> in\nthe zone.\n    Second para\ngraph.\n Total....1 vs 2\n Reuter\n&#3;"
    assert reuters_text(sgml) == "Showers continued <ABC> in the zone.\nSecond para graph.\nTotal....1 vs 2"


def test_imdb_file_names_and_line_breaks():
    assert _REVIEW.match("aclImdb/train/pos/10591_7.txt").groups() == ("train", "pos", "10591", "7")
    assert _REVIEW.match("aclImdb/train/unsup/17_0.txt").groups() == ("train", "unsup", "17", "0")
    assert _REVIEW.match("aclImdb/train/urls_pos.txt") is None
    assert review_text("Great.<br /><br />Really<BR>great.") == "Great.\nReally\ngreat."


def test_litbank_chunks_and_split():
    chunks = chunk_paragraphs(["a b c", "d e", "f g h i j", "k"], chunk_words=4)
    assert chunks == [["a b c", "d e"], ["f g h i j"], ["k"]]
    parts = [litbank_split(position) for position in range(100)]
    assert (parts.count("train"), parts.count("dev"), parts.count("test")) == (80, 10, 10)


def test_readers_reject_bad_options(tmp_path):
    with pytest.raises(ValueError, match="split='training'"):
        list(READERS["ptb"](tmp_path, split="training"))
    with pytest.raises(ValueError, match="limit"):
        READERS["ptb"](tmp_path, limit=-1)
    with pytest.raises(FileNotFoundError, match="lmstudy data fetch"):
        READERS["ptb"](tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="ptb.train.txt"):
        list(READERS["ptb"](tmp_path))
    with pytest.raises(TypeError):
        READERS["ptb"](tmp_path, splitt="train")


def test_every_reader_is_a_catalogue_corpus():
    from lmstudy.data.catalogue import CATALOGUE

    assert set(READERS) <= set(CATALOGUE)
    assert set(DOMAIN_OF) == set(READERS)


# --- the real corpora --------------------------------------------------------------------------

# Options that make the slice cheap where the default reads a long way first.
SLICE_OPTIONS = {"nltk_data": {"corpora": ["qc"]}, "litbank": {"chunk_words": 1000}}


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_yields_documents_in_the_text_convention(name):
    root = corpus_root(name)
    documents = list(READERS[name](root, limit=25, **SLICE_OPTIONS.get(name, {})))
    assert len(documents) == 25
    assert all(isinstance(document, Document) for document in documents)
    assert len({document.doc_id for document in documents}) == 25
    domains = set(NLTK_DOMAIN_OF.values()) if name == "nltk_data" else {DOMAIN_OF[name]}
    for document in documents:
        assert document.domain in domains
        assert document.text and document.text == document.text.strip()
        if name != "gap_coreference":  # GAP keeps its text byte-exact for the character offsets
            assert "\n\n" not in document.text
            assert all(line == line.strip() for line in document.text.split("\n"))


def test_ptb_reproduces_the_manifest_word_counts():
    root = corpus_root("ptb")
    expected = {"train": 887_521, "valid": 70_390, "test": 78_669}  # shared/data/MANIFEST.md
    lines = {"train": 42_068, "valid": 3_370, "test": 3_761}
    for split in expected:
        documents = list(READERS["ptb"](root, split=split))
        assert sum(len(document.text.split()) for document in documents) == expected[split]
        assert len(documents) == lines[split]
        assert {document.meta["split"] for document in documents} == {split}


def test_wikitext_articles_keep_every_word():
    root = corpus_root("wikitext-2")
    for split, words, articles in (("valid", 213_886, 60), ("test", 241_211, 62)):
        documents = list(READERS["wikitext-2"](root, split=split))
        assert len(documents) == articles
        assert sum(len(document.text.split()) for document in documents) == words
        assert all(document.text.startswith(f" = {document.title} = ".strip()) for document in documents)


def test_lambada_passages_and_targets():
    root = corpus_root("lambada")
    dev = list(READERS["lambada"](root, split="dev"))
    assert len(dev) == 4_869
    assert all(document.text.split()[-1] == document.meta["target"] for document in dev)
    openai = list(READERS["lambada"](root, detokenized=True, limit=10))
    assert all(document.meta["target"].isalnum() for document in openai)


def test_streaming_readers_stop_early():
    for name in ("wikipedia", "imdb", "reddit", "litbank"):
        root = corpus_root(name)
        started = time.perf_counter()
        documents = list(READERS[name](root, limit=3))
        elapsed = time.perf_counter() - started
        assert len(documents) == 3
        # The whole corpus takes 10-60 s to stream; three documents must not read it all.
        assert elapsed < 3.0, f"{name}: {elapsed:.1f} s for 3 documents"


def test_wikipedia_articles_are_clean():
    root = corpus_root("wikipedia")
    documents = list(READERS["wikipedia"](root, limit=300))
    for document in documents:
        assert document.doc_id.isdigit() and document.title
        assert not document.text.startswith(document.title + "\n")  # the repeated title is dropped
        assert "<doc" not in document.text and "</doc>" not in document.text
        assert "colspan" not in document.text and "rowspan" not in document.text


def test_imdb_labels_are_the_ratings_in_the_file_names():
    root = corpus_root("imdb")
    documents = list(READERS["imdb"](root, limit=300))
    for document in documents:
        rating = int(document.label)
        assert rating == document.meta["rating"] and document.doc_id.startswith(document.meta["split"])
        assert 1 <= rating <= 4 if document.meta["sentiment"] == "neg" else rating >= 7
        assert "<br" not in document.text.lower()
    assert any("\n" in document.text for document in documents)  # <br /> became line breaks


def test_reddit_recovers_threads_of_a_broken_file(caplog):
    root = corpus_root("reddit")
    with caplog.at_level(logging.WARNING, logger="lmstudy.data.readers.reddit"):
        documents = list(READERS["reddit"](root, subreddits=["weather"]))
    assert {document.label for document in documents} == {"weather"}
    files = {document.meta["file"] for document in documents}
    assert "weather_2015-03-16" in files  # one of the 26 files json.load rejects
    assert "could not be parsed" not in caplog.text  # ... read completely
    assert len({document.doc_id for document in documents}) == len(documents)
    assert any(document.meta["messages"] >= 5 for document in documents)
    for document in documents[:50]:
        lines = document.text.split("\n")
        assert len(lines) >= document.meta["messages"]
        assert "&gt;" not in document.text and "&amp;" not in document.text


def test_irc_windows_and_conversations():
    root = corpus_root("irc")
    windows = list(READERS["irc"](root, limit=20))
    assert all(document.meta["messages"] <= 50 and document.label == "ubuntu" for document in windows)
    assert sum(document.meta["messages"] == 50 for document in windows) >= 15
    for document in windows:
        assert len(document.text.split("\n")) == document.meta["messages"]
        assert not re.search(r"^\[\d\d:\d\d|^===", document.text, re.MULTILINE)
    conversations_ = list(READERS["irc"](root, unit="conversation", speakers=True, limit=50))
    assert all(re.match(r"^[^:\s]+: ", line) for document in conversations_ for line in document.text.split("\n"))
    assert len({document.doc_id for document in conversations_}) == 50


def test_news_readers():
    reuters = list(READERS["reuters21578"](corpus_root("reuters21578"), limit=1000))
    assert all(document.label == (document.meta["topics"] or [None])[0] for document in reuters)
    assert {document.meta["text_type"] for document in reuters} == {"norm", "brief", "unproc"}
    assert all(document.title for document in reuters if document.meta["text_type"] != "unproc")
    assert all(document.text == document.title for document in reuters if document.meta["text_type"] == "brief")
    assert not any("&lt;" in document.text or "\x03" in document.text for document in reuters)
    assert not any(document.text.split("\n")[-1].strip().lower() == "reuter" for document in reuters)
    bbc = list(READERS["bbc_news"](corpus_root("bbc_news"), topics="sport", limit=50))
    assert {document.label for document in bbc} == {"sport"}
    assert all(document.title and not document.text.startswith(document.title) for document in bbc)


def test_litbank_books_and_chunks():
    root = corpus_root("litbank")
    chunks = list(READERS["litbank"](root, chunk_words=2000, limit=30))
    assert len({document.meta["book"] for document in chunks}) == 1  # a first book has > 30 chunks
    words = [len(document.text.split()) for document in chunks]
    assert all(count >= 2000 for count in words[:-1]) and max(words) < 6000
    book = next(iter(READERS["litbank"](root, limit=1)))
    assert book.doc_id == chunks[0].meta["book"] and book.title and book.meta["author"]
    assert book.text.startswith(chunks[0].text)


def test_nltk_corpora_labels():
    root = corpus_root("nltk_data")
    questions = list(READERS["nltk_data"](root, corpora="qc"))
    assert len(questions) == 5_952  # MANIFEST.md: qc 5,952 questions
    assert {document.label for document in questions} == {"ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"}
    brown = list(READERS["nltk_data"](root, corpora=["brown"], limit=5))
    assert [document.label for document in brown] == ["news"] * 5  # ca01..ca05: Press: reportage
    assert all(len(document.text.split()) > 1500 for document in brown)  # ~2,000-word samples
    chat = list(READERS["nltk_data"](root, corpora="nps_chat", limit=2))
    assert all("PART" not in document.text.split("\n") for document in chat)


def test_multi30k_gap_wnut():
    val = {language: list(READERS["multi30k"](corpus_root("multi30k"), split="val", languages=language))
           for language in ("en", "de")}
    assert len(val["en"]) == len(val["de"]) == 1_014
    assert val["en"][0].meta["line"] == val["de"][0].meta["line"] == 1
    for document in READERS["gap_coreference"](corpus_root("gap_coreference"), split="validation"):
        assert document.text[document.meta["pronoun_offset"]:].startswith(document.meta["pronoun"])
        assert document.text[document.meta["a_offset"]:].startswith(document.meta["a"])
    train = list(READERS["wnut17_ner"](corpus_root("wnut17_ner"), split="train"))
    assert len(train) == 3_394 and sum(len(d.meta["tokens"]) for d in train) == 62_730  # README counts
    assert all(valid_iob(document.meta["tags"]) for document in train)


@pytest.fixture(scope="module")
def gum_coref() -> list[CorefDocument]:
    return list(read_gum_coref(corpus_root("gum"), include_reddit=True))


def gum_split_sizes(root: Path) -> dict[str, int]:
    """Documents per split, counted from splits.md directly."""
    with tarfile.open(root / "gum.tar.xz", "r:xz") as archive:
        text = archive.extractfile("splits.md").read().decode("utf-8")
    sizes, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
        elif line.strip().startswith("* "):
            sizes[current] = sizes.get(current, 0) + 1
    return sizes


def test_gum_coref_matches_splits_md_and_stays_in_bounds(gum_coref):
    sizes = gum_split_sizes(corpus_root("gum"))
    counted = {}
    for document in gum_coref:
        counted[document.split] = counted.get(document.split, 0) + 1
    assert counted == sizes
    assert sum(document.doc_id.startswith("GUM_reddit_") for document in gum_coref) == 18  # MANIFEST.md
    assert sum(len(document.tokens) for document in gum_coref) == 268_089  # MANIFEST.md
    for document in gum_coref:
        n = len(document.tokens)
        assert len(document.pos) == n and document.sentence_starts[0] == 0
        assert document.sentence_starts == sorted(set(document.sentence_starts))
        assert document.mentions and all(0 <= m.start < m.end <= n for m in document.mentions)
        assert all(0 <= m.start < m.end <= n and m.entity_type for m in document.entities)
        assert valid_iob(document.entity_iob())
        assert len(document.token_clusters("innermost")) == len(document.token_clusters("outermost")) == n
    typed = sum(m.entity_type is not None for d in gum_coref for m in d.mentions)
    assert typed / sum(len(d.mentions) for d in gum_coref) > 0.99


def test_gum_leaves_masked_reddit_out_by_default():
    root = corpus_root("gum")
    documents = list(READERS["gum"](root))
    assert documents and not any(document.doc_id.startswith("GUM_reddit_") for document in documents)
    splits = {"train", "dev", "test", "test2"}
    assert all(document.label and document.meta["split"] in splits for document in documents)


def test_litbank_coref_documents():
    documents = list(read_litbank_coref(corpus_root("litbank")))
    assert len(documents) == 100
    assert [d.split for d in documents].count("dev") == [d.split for d in documents].count("test") == 10
    assert sum(len(document.tokens) for document in documents) == 210_532  # MANIFEST.md
    for document in documents:
        tags = document.entity_iob()
        assert len(tags) == len(document.tokens) and valid_iob(tags)
        assert any(tag.startswith("B-") for tag in tags)
        assert all(0 <= m.start < m.end <= len(document.tokens) for m in document.mentions)
        assert document.pos is None
    dev = list(read_litbank_coref(corpus_root("litbank"), split="dev"))
    assert [d.doc_id for d in dev] == [d.doc_id for d in documents if d.split == "dev"]
