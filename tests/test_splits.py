"""Document-level splits (lmstudy.data.splits): determinism, disjointness, targets, leakage guard,
committed split files, the normalised-token cache."""

from __future__ import annotations

import random

import pytest

from conftest import require_corpus
from lmstudy.data import splits
from lmstudy.data.documents import Document
from lmstudy.data.splits import DOMAINS, PARTS, SplitTargets, assign_split, load_split
from lmstudy.text import count_tokens, normalise_ptb

WORDS = "the a cat dog sat on mat ran fast slow big small red blue green house tree car".split()
TARGETS = SplitTargets(valid=400, test=500, train=2_000)


def fake_documents(n: int = 200, corpus: str = "fake") -> list[tuple[str, Document]]:
    """``n`` documents of 1-4 lines of random words (deterministic), keyed like real ones."""
    documents = []
    for index in range(n):
        rng = random.Random(index)
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))).capitalize() + "."
                 for _ in range(rng.randint(1, 4))]
        lines[0] += f" doc{index}x"  # no two documents alike
        document = Document(doc_id=str(index), text="\n".join(lines), domain="fake", title=f"Doc {index}")
        documents.append((f"{corpus}:{index}", document))
    return documents


def tokens_of(document: Document) -> int:
    return count_tokens(normalise_ptb(document.text))


def test_split_is_deterministic_and_order_free():
    documents = fake_documents()
    first = assign_split("irc", documents, seed=3, targets=TARGETS)
    assert assign_split("irc", documents, seed=3, targets=TARGETS).ids == first.ids
    assert assign_split("irc", list(reversed(documents)), seed=3, targets=TARGETS).ids == first.ids
    assert assign_split("irc", documents, seed=4, targets=TARGETS).ids != first.ids


def test_parts_are_disjoint_and_hit_their_targets():
    documents = fake_documents()
    by_key = dict(documents)
    split = assign_split("irc", documents, seed=0, targets=TARGETS)
    parts = {part: set(split.ids[part]) for part in ("train", "valid", "test")}
    assert not parts["train"] & parts["valid"]
    assert not parts["train"] & parts["test"]
    assert not parts["valid"] & parts["test"]
    for part, keys in split.ids.items():
        target = getattr(TARGETS, part)
        counted = sum(tokens_of(by_key[key]) for key in keys)
        assert counted == split.tokens[part]
        # "just past the target": reached, and not yet reached without the last document
        assert counted >= target > counted - tokens_of(by_key[keys[-1]])
    pretrain = [key for key in by_key if split.part_of(key) == "pretrain"]
    assert split.documents["pretrain"] == len(pretrain) > 0
    assert split.tokens["pretrain"] == sum(tokens_of(by_key[key]) for key in pretrain)
    assert sum(split.tokens.values()) == sum(tokens_of(document) for document in by_key.values())


def test_duplicates_and_empty_documents_are_dropped():
    documents = fake_documents()
    copy = Document(doc_id="copy", text=documents[5][1].text.replace(" ", "  \n "), domain="fake")
    empty = Document(doc_id="empty", text="... !!\n--", domain="fake")
    split = assign_split("irc", documents + [("fake:copy", copy), ("fake:empty", empty)], targets=TARGETS)
    assert split.dropped == {"fake:copy": "duplicate of fake:5", "fake:empty": "empty after normalisation"}
    assert split.part_of("fake:copy") is None
    # which copy is kept does not depend on reader order
    reordered = [("fake:copy", copy)] + documents[::-1] + [("fake:empty", empty)]
    assert assign_split("irc", reordered, targets=TARGETS) == split
    with pytest.raises(ValueError, match="occurs twice"):
        assign_split("irc", documents + documents[:1], targets=TARGETS)


def test_too_small_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="not enough"):
        assign_split("irc", fake_documents(20), targets=TARGETS)


def test_json_round_trip_and_unknown_names():
    split = assign_split("irc", fake_documents(), targets=TARGETS)
    assert splits.Split.from_json(split.to_json()) == split
    with pytest.raises(KeyError, match="unknown domain"):
        load_split("klingon")
    with pytest.raises(ValueError, match="unknown split part"):
        next(splits.split_documents("irc", "dev"))


# --- leakage guard -------------------------------------------------------------------------------

def test_wikitext_eval_titles_and_guard():
    require_corpus("wikitext-2")
    require_corpus("wikitext-2-raw")
    titles = splits.wikitext_eval_titles()
    assert {"temple beth israel (eugene, oregon)", "chad at the 2008 summer olympics"} <= titles
    assert len(titles) > 50  # 62 test + the unmasked valid titles
    documents = fake_documents()
    leaked = Document(doc_id="18484687", text="Temple Beth Israel is a synagogue.", domain="wikipedia",
                      title="Temple Beth Israel (Eugene, Oregon)")
    split = assign_split("wikipedia", documents + [("wikipedia:18484687", leaked)], targets=TARGETS,
                         drop_titles=titles)
    assert split.dropped == {"wikipedia:18484687": "evaluation article: Temple Beth Israel (Eugene, Oregon)"}


# --- the committed split files ------------------------------------------------------------------

@pytest.mark.parametrize("domain", list(DOMAINS))
def test_committed_split_files(domain):
    split = load_split(domain)
    assert split.domain == domain
    if split.official_parts:  # PTB: Mikolov's files, tokens incl. <eos>
        assert split.tokens["train"] == 887_521 + 42_068
        assert split.tokens["pretrain"] == load_split(split.pretrain_from).tokens["pretrain"]
        return
    keys = [key for part in ("train", "valid", "test") for key in split.ids[part]]
    assert len(keys) == len(set(keys))
    assert not set(keys) & set(split.dropped)
    for part in ("train", "valid", "test"):
        assert split.tokens[part] >= split.targets[part]
        assert split.documents[part] == len(split.ids[part])
    assert split.tokens["pretrain"] > split.tokens["train"]
    corpora = {source[0] for source in split.sources}
    assert {key.split(":", 1)[0] for key in keys} <= corpora


def test_committed_wikipedia_split_dropped_the_wikitext_articles():
    dropped = load_split("wikipedia").dropped
    assert dropped["wikipedia:18484687"] == "evaluation article: Temple Beth Israel (Eugene, Oregon)"
    assert dropped["wikipedia:18557492"] == "evaluation article: Chad at the 2008 Summer Olympics"


def test_split_documents_streams_a_part():
    require_corpus("ptb")
    documents = list(splits.split_documents("ptb", "valid", limit=2))
    assert 1 <= len(documents) <= 2 and all(document.text for document in documents)


def test_committed_news_keys_are_read_by_the_readers():
    """The committed ids still name documents the readers yield (catches a reader changing its ids)."""
    require_corpus("reuters21578")
    require_corpus("bbc_news")
    split = load_split("news")
    keys = {key for key, _ in splits.iter_domain_documents("news")}
    assert {key for part in ("train", "valid", "test") for key in split.ids[part]} <= keys
    assert set(split.dropped) <= keys
    assert len(keys) - len(split.dropped) == sum(split.documents.values())


# --- the token cache and the rare-word table on a fake domain -----------------------------------

@pytest.fixture
def fake_domain(tmp_path, monkeypatch):
    """The "irc" domain replaced by fake documents; split files, caches and figures under tmp_path."""
    documents = fake_documents()
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("LMSTUDY_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setattr(splits, "SPLITS_DIR", tmp_path / "splits")
    monkeypatch.setattr(splits, "iter_domain_documents", lambda domain, limit=None: iter(documents))
    return documents, splits.build_split("irc", targets=TARGETS)


def test_token_cache_matches_the_split(fake_domain):
    documents, split = fake_domain
    assert load_split("irc") == split
    by_key = dict(documents)
    for part in PARTS:
        # train/valid/test in split order, pretrain in reader order
        keys = split.ids.get(part) or [key for key, _ in documents if split.part_of(key) == part]
        expected = [sentence for key in keys for sentence in normalise_ptb(by_key[key].text)]
        assert splits.split_tokens("irc", part) == expected
        assert count_tokens(expected) == split.tokens[part]
    valid_sentences = splits.split_tokens("irc", "valid")
    assert sum(splits.split_counts("irc", "valid").values()) == split.tokens["valid"] - len(valid_sentences)
    # A changed split file makes the cache stale: it is rebuilt from the new split.
    cache = splits.token_file("irc", "valid")
    splits.build_split("irc", seed=1, targets=TARGETS)
    assert splits.token_file("irc", "valid") == cache
    assert count_tokens(splits.split_tokens("irc", "valid")) == load_split("irc").tokens["valid"]
    assert load_split("irc").ids["valid"] != split.ids["valid"]


def test_rare_word_table_files(fake_domain, tmp_path):
    from lmstudy.data.stats import PAPER_TABLE_4, write_rare_word_table
    from lmstudy.text import rare_word_stats

    table = write_rare_word_table(["irc"])
    ours = table[table.source == "lmstudy"].iloc[0]
    expected = rare_word_stats(splits.split_counts("irc", "train"), splits.split_counts("irc", "pretrain"))
    assert ours.train_type_pct == pytest.approx(expected.train_type_pct)
    assert ours.train_in_pre_token_pct == pytest.approx(expected.train_in_pre_token_pct)
    assert list(table[table.source != "lmstudy"].dataset) == list(PAPER_TABLE_4)
    csv = (tmp_path / "figures" / "rare_words.csv").read_text()
    markdown = (tmp_path / "figures" / "rare_words.md").read_text()
    assert csv.count("\n") == 1 + 1 + len(PAPER_TABLE_4)
    assert "| PTB | Welch et al. 2020, Table 4 | 73 | 5.3 | 77 | 0.11 | 14 | 1.3 |" in markdown
    assert "Mikolov" in markdown


def test_stats_command(fake_domain, capsys):
    import argparse

    from lmstudy.data.stats import register

    parser = argparse.ArgumentParser(prog="lmstudy data")
    register(parser.add_subparsers())
    args = parser.parse_args(["stats", "irc", "--threshold", "2"])
    assert args.handler(args) == 0
    assert "rare_words.csv" in capsys.readouterr().out
