"""Document-level splits (lmstudy.data.splits, their parts read through lmstudy.data.parts): determinism, disjointness, targets, near-duplicate
clusters, IRC logs, leakage guard, committed split files, the normalised-token cache, the base model's
training stream on a fake domain (the leak test on the real corpora is tests/test_leakage.py)."""

from __future__ import annotations

import random

import pytest

from conftest import require_corpus
from lmstudy.data import base_manifest, parts, splits
from lmstudy.data.documents import Document
from lmstudy.data.splits import DOMAINS, PARTS, SplitTargets, assign_split, load_split
from lmstudy.text import count_tokens, normalise_ptb

WORDS = "the a cat dog sat on mat ran fast slow big small red blue green house tree car".split()
TARGETS = SplitTargets(valid=400, test=500, train=2_000)


def fake_document(doc_id: str, text: str, log: str | None = None) -> Document:
    """A document the "irc" domain accepts: its meta names a log (by default a log of its own)."""
    return Document(doc_id=doc_id, text=text, domain="fake", title=f"Doc {doc_id}",
                    meta={"part": "fake", "file": log or f"log-{doc_id}"})


def fake_documents(n: int = 200, corpus: str = "fake") -> list[tuple[str, Document]]:
    """``n`` documents of 1-4 lines of random words (deterministic), keyed like real ones."""
    documents = []
    for index in range(n):
        rng = random.Random(index)
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))).capitalize() + "."
                 for _ in range(rng.randint(1, 4))]
        lines[0] += f" doc{index}x"  # no two documents alike
        documents.append((f"{corpus}:{index}", fake_document(str(index), "\n".join(lines))))
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
    copy = fake_document("copy", documents[5][1].text.replace(" ", "  \n "))
    # Same words, case, quotes and punctuation aside: a duplicate too.
    variant = fake_document("variant", "\u201c" + documents[6][1].text.upper().replace(".", "!") + "\u201d")
    empty = fake_document("empty", "... !!\n--")
    split = assign_split("irc", documents + [("fake:copy", copy), ("fake:variant", variant), ("fake:empty", empty)],
                         targets=TARGETS)
    assert split.dropped == {"fake:copy": "duplicate of fake:5", "fake:variant": "duplicate of fake:6",
                             "fake:empty": "empty after normalisation"}
    assert split.part_of("fake:copy") is None
    # which copy is kept does not depend on reader order
    reordered = [("fake:copy", copy)] + documents[::-1] + [("fake:empty", empty), ("fake:variant", variant)]
    assert assign_split("irc", reordered, targets=TARGETS) == split
    with pytest.raises(ValueError, match="occurs twice"):
        assign_split("irc", documents + documents[:1], targets=TARGETS)


def long_fake_text(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choices(WORDS, k=words)) + f" long{seed}x."


def test_near_twins_land_in_one_part():
    """A document and its near-twin (quotes, case, a changed word) are in the same part, whatever the seed."""
    documents = fake_documents()
    twins = []
    for number in range(5):
        text = long_fake_text(1000 + number)
        twin = '"' + text.replace(" cat ", " dog ", 1).title() + '"'
        twins += [(f"fake:twin{number}a", fake_document(f"twin{number}a", text)),
                  (f"fake:twin{number}b", fake_document(f"twin{number}b", twin + " And one more line."))]
    for seed in range(4):
        split = assign_split("irc", documents + twins, seed=seed, targets=TARGETS)
        for number in range(5):
            assert split.part_of(f"fake:twin{number}a") == split.part_of(f"fake:twin{number}b") is not None
        assert split.dedup["clusters_of_several"] == 5 and split.dedup["documents_in_clusters_of_several"] == 10
        assert split.dedup["clusters"] == split.dedup["documents"] - 5 == len(documents) + 5


def test_irc_windows_of_a_log_stay_together():
    documents = [(key, fake_document(document.doc_id, document.text, log=f"log{int(document.doc_id) // 4}"))
                 for key, document in fake_documents()]
    split = assign_split("irc", documents, seed=0, targets=TARGETS)
    part_of_log: dict[str, set] = {}
    for key, document in documents:
        part_of_log.setdefault(document.meta["file"], set()).add(split.part_of(key))
    assert all(len(parts) == 1 for parts in part_of_log.values())
    assert {part for parts in part_of_log.values() for part in parts} == set(PARTS)
    assert split.dedup["units"] == ["part", "file"] and split.dedup["clusters"] == 50
    with pytest.raises(ValueError, match="no meta field"):
        assign_split("irc", [("fake:x", Document("x", "a text", domain="irc"))], targets=TARGETS)


def test_oversized_cluster_goes_to_pretrain():
    documents = fake_documents()
    big = [(f"fake:big{k}", fake_document(f"big{k}", long_fake_text(k, 40), log="big")) for k in range(30)]
    for seed in range(3):
        split = assign_split("irc", big + documents, seed=seed, targets=TARGETS)  # ~1,300 tokens > 0.5 x train
        assert {split.part_of(key) for key, _ in big} == {"pretrain"}
        assert split.dedup["oversized_clusters_to_pretrain"] >= 1


def test_too_small_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="not enough"):
        assign_split("irc", fake_documents(20), targets=TARGETS)


def test_json_round_trip_and_unknown_names():
    split = assign_split("irc", fake_documents(), targets=TARGETS)
    assert splits.Split.from_json(split.to_json()) == split
    version_1 = split.to_json().replace(f'"format": {splits.FORMAT_VERSION}', '"format": 1')
    with pytest.raises(ValueError, match="format 1.*near-duplicate.*build_all_splits"):
        splits.Split.from_json(version_1)
    with pytest.raises(KeyError, match="unknown domain"):
        load_split("klingon")
    with pytest.raises(ValueError, match="unknown split part"):
        next(parts.split_documents("irc", "dev"))


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
    documents = list(parts.split_documents("ptb", "valid", limit=2))
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
    for module in (splits, parts):  # the shingles read the domain, and so do the parts' readers
        monkeypatch.setattr(module, "iter_domain_documents", lambda domain, limit=None: iter(documents))
    # The pretrain part's evaluation-text filter reads every domain's evaluation texts: here the fake domain's
    # own valid/test only (a test adds external ones through _external_evaluation_texts).
    for module in (splits, base_manifest):
        monkeypatch.setattr(module, "SHUFFLED_DOMAINS", ("irc",))
    for module in (base_manifest, parts):
        monkeypatch.setattr(module, "BASE_DOMAINS", ("irc",))
    monkeypatch.setattr(base_manifest, "EXTERNAL_EVALUATION", ())
    monkeypatch.setattr(base_manifest, "_external_evaluation_texts", lambda: iter(()))
    return documents, splits.build_split("irc", targets=TARGETS)


def test_token_cache_matches_the_split(fake_domain):
    documents, split = fake_domain
    assert load_split("irc") == split
    by_key = dict(documents)
    for part in PARTS:
        # train/valid/test in split order, pretrain in reader order
        keys = split.ids.get(part) or [key for key, _ in documents if split.part_of(key) == part]
        expected = [sentence for key in keys for sentence in normalise_ptb(by_key[key].text)]
        assert parts.split_tokens("irc", part) == expected
        assert count_tokens(expected) == split.tokens[part]
    valid_sentences = parts.split_tokens("irc", "valid")
    assert sum(parts.split_counts("irc", "valid").values()) == split.tokens["valid"] - len(valid_sentences)
    # A changed split file makes the cache stale: it is rebuilt from the new split.
    cache = parts.token_file("irc", "valid")
    splits.build_split("irc", seed=1, targets=TARGETS)
    assert parts.token_file("irc", "valid") == cache
    assert count_tokens(parts.split_tokens("irc", "valid")) == load_split("irc").tokens["valid"]
    assert load_split("irc").ids["valid"] != split.ids["valid"]


def test_rare_word_table_files(fake_domain, tmp_path):
    from lmstudy.data.stats import PAPER_TABLE_4, write_rare_word_table
    from lmstudy.text import rare_word_stats

    table = write_rare_word_table(["irc"])
    ours = table[table.source == "lmstudy"].iloc[0]
    expected = rare_word_stats(parts.split_counts("irc", "train"), parts.split_counts("irc", "pretrain"))
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

    from lmstudy.data.cli import register

    parser = argparse.ArgumentParser(prog="lmstudy data")
    register(parser.add_subparsers())
    args = parser.parse_args(["stats", "irc", "--threshold", "2"])
    assert args.handler(args) == 0
    assert "rare_words.csv" in capsys.readouterr().out


def test_base_training_stream_drops_evaluation_copies(fake_domain, monkeypatch):
    """On the fake domain: a pretrain document that holds an evaluation text is left out of the base
    stream, the rest is the pretrain part in reader order; the manifest is cached."""
    documents, split = fake_domain
    pretrain = [(key, document) for key, document in documents if split.part_of(key) == "pretrain"]
    copied_key, copied = pretrain[3]
    external = [("lambada test|lambada:1", copied.text.lower(), None),  # a copy, case aside
                ("lambada test|lambada:2", "words that are in no fake document at all", None)]
    monkeypatch.setattr(base_manifest, "_external_evaluation_texts", lambda: iter(external))
    evaluation = base_manifest.evaluation_shingles()
    assert evaluation.keys[:2] == ["lambada test|lambada:1", "lambada test|lambada:2"]
    assert sorted(evaluation.keys[2:]) == sorted(f"irc {part}|{key}" for part in ("valid", "test")
                                                 for key in split.ids[part])
    manifest = base_manifest.base_training_manifest()
    irc = manifest["domains"]["irc"]
    assert irc["dropped"] == {copied_key: "contains 100% of evaluation text lambada test|lambada:1"}
    assert irc["dropped_by_set"] == {"lambada test": 1} and irc["kept"] == len(pretrain) - 1
    stream = list(parts.base_training_documents())
    assert [key for _, key, _ in stream] == [key for key, _ in pretrain if key != copied_key]
    assert {domain for domain, _, _ in stream} == {"irc"}
    # Every reader of the pretrain part leaves the copy out, not the base's stream only: the token cache (the
    # Welch embeddings and the rare-word tables read it) and split_documents.
    kept_text = [sentence for key, document in pretrain if key != copied_key for sentence in normalise_ptb(document.text)]
    assert parts.split_tokens("irc", "pretrain") == kept_text
    assert [d.text for d in parts.split_documents("irc", "pretrain")] == [d.text for k, d in pretrain if k != copied_key]
    assert base_manifest.pretrain_dropped("irc") == irc["dropped"] and base_manifest.pretrain_dropped("my_corpus") == {}
    # The second call reads the cached manifest.
    monkeypatch.setattr(base_manifest, "evaluation_shingles", lambda: pytest.fail("manifest recomputed"))
    assert base_manifest.base_training_manifest() == manifest
