"""CTRL study, beyond one domain code: link codes from the corpora's metadata, code-mixing (composite codes
with another domain's template), the Table 3 link probe, ``ctrl add-codes`` and the app's column count.
Tiny models trained here on synthetic text (seconds)."""

from __future__ import annotations

import argparse
import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from lmstudy.ctrl import add_codes as add_codes_module
from lmstudy.ctrl.add_codes import AddCodesConfig, add_codes, parse_code_paths, read_code_texts, split_held_out
from lmstudy.ctrl.codes import (
    CODES,
    check_secondary,
    code_texts,
    format_text,
    link_url,
    secondary_kind,
    template_owners,
)
from lmstudy.ctrl.data import CodedTexts
from lmstudy.ctrl.generation import code_prefix, generate_codes, generate_rows
from lmstudy.ctrl.model import ControlConfig, fit, load_control_model
from lmstudy.ctrl.probes import (
    GERMAN,
    LinkProbe,
    MixingProbe,
    code_mixing_summary,
    code_mixing_table,
    link_probe,
    link_probe_summary,
    mentions,
    template_kept,
    word_overlap,
)
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.ctrl.study import train_domain_classifier
from lmstudy.data.documents import Document
from lmstudy.runs import get_run

torch.set_num_threads(1)

WIKI = "river mountain valley city region castle village forest lake island".split()
ASK = "who what where when why which how many much long".split()
ENGLISH = "the man dog woman street red house small walks runs".split()
GERMAN_WORDS = "der mann hund frau strasse rot haus klein geht rennt".split()
GRAIN = "wheat corn harvest tonnes farmers crop export maize barley soybean".split()
CRUDE = "oil barrel opec refinery petroleum drilling pipeline gasoline output prices".split()
GAMMA = "violin cello sonata concerto orchestra tempo melody chord piano flute".split()


def sentences(words: list[str], n: int, seed: int, length: int = 10) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    return [" ".join(words[i] for i in torch.randint(len(words), (length,), generator=g).tolist())
            for _ in range(n)]


def study_texts(n: int, seed: int) -> dict[str, list[str]]:
    """Synthetic documents of four of the study's codes, written the way codes.format_text writes them."""
    questions = [f"Q: {s} ?" for s in sentences(ASK, n, seed, 6)]
    translation = [f"English: {en} ; German: {de}"
                   for en, de in zip(sentences(ENGLISH, n, seed + 1, 6), sentences(GERMAN_WORDS, n, seed + 1, 6))]
    links = [f"https://www.reuters.com/1987/03/12/{topic}\n{text}."
             for k in range(n) for topic, text in [("grain", sentences(GRAIN, 1, seed + 10 + k, 4)[0]),
                                                   ("crude", sentences(CRUDE, 1, seed + 500 + k, 4)[0])]]
    return {"Wikipedia": [s + "." for s in sentences(WIKI, n, seed + 2)], "Questions": questions,
            "Translation": translation, "Links": links}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    texts = CodedTexts(train=study_texts(60, 1), valid=study_texts(4, 100))
    config = ControlConfig(vocab_size=400, n_layer=1, n_head=2, n_embd=48, seq_len=48, batch_size=8,
                           max_steps=150, eval_every=75, lr=5e-3, lr_schedule="constant", seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMSTUDY_RUNS", str(tmp_path_factory.mktemp("runs")))
        run = get_run("test_control_mixing", {"synthetic": 1})
        fit(config, texts, run)
    return load_control_model(run.path / "model", device="cpu"), texts, run.path / "model"


# --------------------------------------------------------------------------------------------
# link codes and composite codes


def test_link_urls_come_from_each_corpus_metadata():
    reuters = Document("1", "Showers continued.", "news", "cocoa", "BAHIA COCOA REVIEW",
                       {"topics": ["cocoa"], "date": "26-FEB-1987 15:01:01.79"})
    assert link_url(reuters) == "https://www.reuters.com/1987/02/26/cocoa/bahia-cocoa-review"
    untopical = Document("2", "Text.", "news", None, "Fed adds reserves", {"topics": [], "date": " 7-APR-1987 11:0"})
    assert link_url(untopical) == "https://www.reuters.com/1987/04/07/news/fed-adds-reserves"
    bbc = Document("tech/1", "Body.", "news", "tech", "Games maker fights for survival", {"topic": "tech"})
    assert link_url(bbc) == "https://news.bbc.co.uk/tech/games-maker-fights-for-survival"
    wiki = Document("3", "Text.", "wikipedia", None, "Chen Zhili", {"url": "x"})
    assert link_url(wiki) == "https://en.wikipedia.org/wiki/Chen_Zhili"
    reddit = Document("4", "Is it me or is 800 pages an hour slow?\nIt is.", "reddit", "books", None, {})
    assert link_url(reddit) == "https://www.reddit.com/r/books/comments/is-it-me-or-is-800-pages-an"
    assert link_url(Document("5", "lol", "reddit", "extra", None, {})) is None  # not a subreddit
    assert format_text(CODES["Links"], bbc) == "https://news.bbc.co.uk/tech/games-maker-fights-for-survival\nBody."
    with pytest.raises(ValueError, match="no metadata to build a link"):
        format_text(CODES["Links"], Document("6", "x", "imdb", None, None, {}))


def test_links_documents_from_the_corpora():
    from tests.conftest import require_corpus

    for corpus in ("reuters21578", "bbc_news", "wikipedia", "reddit"):
        require_corpus(corpus)
    texts = code_texts("Links", "valid", limit=6)  # news, wikipedia, reddit in turn
    assert len(texts) == 6 and [t.split("/")[2] for t in texts[:3]] == [
        "www.reuters.com", "en.wikipedia.org", "www.reddit.com"]
    assert all("\n" in text and not text.split("\n", 1)[0].count(" ") for text in texts)  # URL line, then text
    assert not set(texts) & set(code_texts("Links", "train", limit=30))


def test_code_mixing_accepts_another_domains_template_and_refuses_unknown_forms():
    assert check_secondary("r/Sports", "English: The game ; German:") == "translation"  # Table 5's mixing
    assert check_secondary("Wikipedia", "Q:") == "question" and check_secondary("Reviews", "Rating: 2.0") == "rating"
    assert check_secondary("Links", "https://x.org/a") == "link"
    assert check_secondary("Recipes", "anything at all") == ""  # a user's code (add-codes): any text
    with pytest.raises(ValueError, match="after Reviews write `Rating: 1.0` to `Rating: 5.0` \\(or, to mix codes"):
        check_secondary("Reviews", "Stars: 5")
    with pytest.raises(ValueError, match="Wikipedia takes no secondary code of its own"):
        check_secondary("Wikipedia", "Hello")
    assert secondary_kind("Rating: 7.0") is None
    assert template_owners("translation") == ["Translation"] and template_owners("title_text") == ["News"]


def test_composite_codes_generate_after_their_template(model):
    loaded, _, _ = model
    tok = loaded.tokenizer
    prefix = code_prefix(tok, "Wikipedia English:")
    assert prefix.code == "Wikipedia English:" and prefix.glue == " " and tok.decode(prefix.ids[1:]) == "English:"
    greedy = SamplingConfig(greedy=True)
    mixed, plain = generate_codes(loaded.model, tok, "the man ; German:", ["Wikipedia English:", "Wikipedia"],
                                  greedy, 8)
    assert mixed.code == "Wikipedia English:" and plain.code == "Wikipedia"
    row = prefix.ids + tok(" the man ; German:", add_special_tokens=False)["input_ids"]
    alone = generate_rows(loaded.model, [row], greedy, 8, [0], tok.eos_token_id)[0]
    assert mixed.token_ids == alone  # the composite row: code token + template + prompt, padded in the batch
    with pytest.raises(ValueError, match="after Questions write `Q:`"):
        generate_codes(loaded.model, tok, "x", ["Questions What?"])
    from lmstudy.ctrl.cli import _codes

    assert _codes(["Wikipedia,Questions", "Wikipedia English: a, b ; German:"]) == [
        "Wikipedia", "Questions", "Wikipedia English: a, b ; German:"]


# --------------------------------------------------------------------------------------------
# the measurements


def test_template_and_domain_checks():
    assert template_kept("question", " who is it ?\nmore") == 1.0
    assert template_kept("question", "who is it\n?") == 0.0  # the question must close on its own line
    languages = SimpleNamespace(predict=lambda texts: [GERMAN if "der" in texts[0] else "English"])
    assert template_kept("translation", "der mann\nthe man", languages) == 1.0
    assert template_kept("translation", "the man", languages) == 0.0
    assert math.isnan(template_kept("translation", "der mann")) and math.isnan(template_kept("rating", "x"))
    assert word_overlap("a b c", "b c d") == pytest.approx(0.5) and word_overlap("", "") == 1.0
    assert mentions("grain", "wheat and grain.") == 1.0 and mentions("money-fx", "dollar") == 0.0
    assert mentions("1987/02/26", "Oil rose in February.") == 1.0 and mentions("1987/06/15", "in February") == 0.0
    assert math.isnan(mentions("2024", "anything"))


def test_code_mixing_table(model):
    loaded, texts, _ = model
    classifier = train_domain_classifier({name: texts.train[name] for name in ("Wikipedia", "Questions", "Links")})
    languages = train_domain_classifier({"English": sentences(ENGLISH, 30, 7), GERMAN: sentences(GERMAN_WORDS, 30, 8)})
    probes = [MixingProbe("Wikipedia", "Q:", "who"), MixingProbe("Wikipedia", "English:", "the dog ; German:"),
              MixingProbe("r/Sports", "Q:", "who")]  # r/Sports is no code of this model: skipped
    table = code_mixing_table(loaded.model, loaded.tokenizer, classifier, probes, languages=languages,
                              max_new_tokens=20, seeds=(0, 1))
    # 2 mixed probes + the 2 reference rows (each template under its own domain), 2 seeds each
    assert len(table) == 8 and set(table["code"]) == {"Wikipedia Q:", "Wikipedia English:", "Questions Q:",
                                                      "Translation English:"}
    assert set(table.loc[~table["mixed"], "domain"]) == {"Questions", "Translation"}
    assert table["template_kept"].isin([0.0, 1.0]).all()
    # the reference: the model learnt "Q: ... ?" and "English: ... ; German: <German>" under their own codes
    reference = table[~table["mixed"]].groupby("domain")["template_kept"].mean()
    assert reference["Questions"] >= 0.5 and reference["Translation"] >= 0.5
    # domain kept: for a mixed code, the classifier's choice among the codes other than the template's own
    assert (table.loc[table["code"] == "Wikipedia Q:", "domain_predicted"] != "Questions").all()
    assert table.loc[table["code"] == "Questions Q:", "domain_kept"].isin([0.0, 1.0]).all()  # its own: allowed
    assert table.loc[table["domain"] == "Translation", "domain_kept"].isna().all()  # not a classifier class
    summary = code_mixing_summary(table)
    assert len(summary) == 4 and (summary["generations"] == 2).all()
    with pytest.raises(ValueError, match="none of the probes' domain codes"):
        code_mixing_table(loaded.model, loaded.tokenizer, classifier, [MixingProbe("Books", "Q:", "who")])


def test_link_probe_measures_how_much_the_url_changes_the_continuation(model, monkeypatch):
    from lmstudy.ctrl import probes

    loaded, _, _ = model
    probe = LinkProbe("Reuters topic", "https://www.reuters.com/1987/03/12/{}", ("grain", "crude", "acq"))
    # On the tiny model: the probe runs, one row per value, under the Links code with the URL as the prompt.
    table = link_probe(loaded.model, loaded.tokenizer, [probe], max_new_tokens=8)
    assert list(table["value"]) == ["grain", "crude", "acq"] and table["url"][0].endswith("/12/grain")
    assert table["overlap"].between(0, 1).all()
    # The measures themselves, on continuations we choose: a model that writes about the URL's topic.
    written = {"grain": "wheat corn grain harvest", "crude": "oil barrel crude prices", "acq": "oil barrel prices"}
    seen = []

    def fake_generate(model, tokenizer, prompt, codes, sampling, max_new_tokens, seed):
        seen.append((prompt, codes, sampling))
        return [SimpleNamespace(text=written[prompt.strip().rsplit("/", 1)[1]])]

    monkeypatch.setattr(probes, "generate_codes", fake_generate)
    topics = SimpleNamespace(predict=lambda texts: ["grain" if "wheat" in texts[0] else "crude"])
    table = link_probe(None, None, [probe], classifiers={"Reuters topic": topics})
    assert seen[0] == ("https://www.reuters.com/1987/03/12/grain\n", ["Links"], probes.TABLE3_DECODING)
    assert table["overlap"].tolist() == pytest.approx([0.0, (0.0 + 3 / 4) / 2, (0.0 + 3 / 4) / 2])
    assert table["mentions"].tolist() == [1.0, 1.0, 0.0] and table["matches"].tolist() == [True, True, False]
    summary = link_probe_summary(table)
    assert summary.loc[0, "distinct"] == 3 and summary.loc[0, "overlap"] == pytest.approx((0 + 0 + 3 / 4) / 3)
    assert summary.loc[0, "mentions"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="at least two values"):
        link_probe(None, None, [LinkProbe("one", "https://x/{}", ("a",))])


# --------------------------------------------------------------------------------------------
# ctrl add-codes


def test_reading_and_splitting_new_code_text(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for k in range(5):
        (folder / f"{k}.txt").write_text(f"  document {k}\n\nline two\n", encoding="utf-8")
    assert read_code_texts(folder)[0] == "document 0\nline two"
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": f"text {k}"}) for k in range(3)) + "\n", encoding="utf-8")
    assert read_code_texts(jsonl, "body") == ["text 0", "text 1", "text 2"]
    assert split_held_out(list("abcdefghij"), 0.1) == (list("abcdefghi"), ["j"])
    assert split_held_out(["a", "b"], 0.5) == (["a"], ["b"])
    single = tmp_path / "single"
    single.mkdir()
    (single / "only.txt").write_text("one document\n", encoding="utf-8")
    with pytest.raises(ValueError, match="at least 2"):
        read_code_texts(single)
    with pytest.raises(ValueError, match="NAME=PATH"):
        parse_code_paths(["Recipes"])


def test_add_codes_learns_a_held_out_domain_and_keeps_the_old_codes(model, tmp_path, monkeypatch, capsys):
    loaded, texts, model_dir = model
    gamma = tmp_path / "gamma"
    gamma.mkdir()
    for k, text in enumerate(sentences(GAMMA, 40, 9)):
        (gamma / f"{k:02d}.txt").write_text(text + ".\n", encoding="utf-8")
    # The old codes' text: the study reads it from the corpora (codes.code_texts); here, the fixture's.
    monkeypatch.setattr(add_codes_module, "code_texts",
                        lambda name, part, limit: (texts.train if part == "train" else texts.valid)[name][:limit])
    models = tmp_path / "models"
    monkeypatch.setenv("LMSTUDY_MODELS", str(models))
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    from lmstudy.ctrl.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["ctrl", "add-codes", "--model", str(model_dir), "--code", f"Music={gamma}",
                              "--steps", "60", "--lr", "3e-3", "--held-out", "0.2", "--eval-docs", "4"])
    assert args.handler(args) == 0
    out = models / "model+Music"
    assert f"wrote {out}" in capsys.readouterr().out
    info = json.loads((out / "control_codes.json").read_text())
    table = pd.read_csv(out / add_codes_module.REPORT_FILE)
    assert info["codes"] == ["Wikipedia", "Questions", "Translation", "Links", "Music"]
    assert info["added_codes"]["Music"]["path"] == str(gamma.resolve())
    assert (out / "model.safetensors").is_file()
    new = load_control_model(out, device="cpu")
    assert new.tokenizer.convert_tokens_to_ids("<|Music|>") == len(loaded.tokenizer)  # one new id, the old ones kept
    rows = table.set_index("code")
    assert rows.loc["Music", "held_out_documents"] == 8 and math.isnan(rows.loc["Music", "top1_before"])
    assert rows.loc["Music", "top1_after_all_codes"] == 1.0  # its held-out documents are attributed to it
    for old in ["Wikipedia", "Questions", "Translation", "Links"]:  # the old codes still work
        assert rows.loc[old, "top1_after_old_codes"] >= rows.loc[old, "top1_before"] - 0.25
        assert rows.loc[old, "loss_after"] < rows.loc[old, "loss_before"] + 0.5
    from lmstudy.ctrl.serving import allowed_checkpoints

    assert "model+Music" in {path.name for path in allowed_checkpoints().values()}  # the app lists it
    # errors: the destination exists; a name already taken; an old code whose text is unknown
    with pytest.raises(ValueError, match="exists: choose another --out"):
        add_codes(model_dir, {"Music": gamma}, out)
    with pytest.raises(ValueError, match="'Questions' is already a control code"):
        add_codes(model_dir, {"Questions": gamma}, tmp_path / "x")
    with pytest.raises(ValueError, match="its text is unknown"):
        add_codes_module.old_code_texts(out, ["Mystery"], AddCodesConfig())
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------
# the app: as many columns as the model has codes


def test_app_columns_follow_the_models_codes():
    import app

    def served(codes, kind="control"):
        return SimpleNamespace(codes=codes, kind=kind)

    assert app._default_columns(served(["A", "B"])) == 2 and app._default_codes(served(["A", "B"])) == [
        "A", "B", "", ""]
    assert app._default_columns(served(["A", "B", "C"])) == 3
    assert app._default_columns(served([f"c{k}" for k in range(20)])) == 4
    assert app._default_columns(served(["A"])) == 2 and app._default_codes(served(["A"]))[:2] == ["A", "A"]
    assert app._default_columns(served([], "plain")) == 4 and app._default_columns(None) == 4
