"""Two control-code models side by side in bits per byte (lmstudy/ctrl/compare.py): the likelihood matrix agrees
with attribution's, the right code wins on a model trained to tell two synthetic domains apart, the per-domain
and attribution tables read the matrix correctly, and the command writes resumable per-model parts (on the
committed demo model, a document a code)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmstudy.ctrl import compare
from lmstudy.ctrl.attribution import code_log_likelihoods
from lmstudy.ctrl.study import attribution_summary, confusion_matrix
from lmstudy.ctrl.serving import EXAMPLES
from lmstudy.paths import REPO_ROOT
from tests.conftest import require_corpus
from tests.test_control import trained  # noqa: F401  (a fixture: a tiny model that tells Alpha from Beta)


def test_code_bits_agrees_with_attribution_and_the_right_code_wins(trained):  # noqa: F811
    loaded, _, texts, _ = trained
    bits = compare.code_bits(loaded.model, loaded.tokenizer, texts.valid, max_chars=40)
    assert len(bits) == 8 * 3 and set(bits["condition"]) == {"Alpha", "Beta", compare.NO_CODE}
    first = bits[(bits["domain"] == "Alpha") & (bits["document"] == 0)].set_index("condition")
    expected, _ = code_log_likelihoods(loaded.model, loaded.tokenizer, texts.valid["Alpha"][0][:40], ["Alpha", "Beta"])
    assert first.loc[["Alpha", "Beta"], "nats"].tolist() == pytest.approx([-value for value in expected], rel=1e-5)
    assert (first["bytes"] == len(texts.valid["Alpha"][0][:40].encode("utf-8"))).all()
    domains = compare.domain_bits(bits)
    assert list(domains["domain"]) == ["Alpha", "Beta"] and (domains["documents"] == 4).all()
    assert (domains["right_code"] < domains["wrong_code_mean"]).all()
    assert (domains["no_code"] > 0).all()  # (eos in the code's place: this tiny model has no reason to prefer its code to it)
    assert domains.loc[0, "best_wrong_code"] == "Beta"  # the only wrong code
    alpha = bits[(bits["domain"] == "Alpha") & (bits["condition"] == "Alpha")]
    assert domains.loc[0, "right_code"] == pytest.approx(alpha["nats"].sum() / alpha["bytes"].sum() / math.log(2))
    rows = compare.attribution_rows(bits)
    assert len(rows) == 8 and rows["correct"].all() and (rows["true_rank"] == 1).all()
    assert attribution_summary(rows).iloc[-1]["top1"] == 1.0


def test_attribution_rows_rank_by_likelihood_per_model():
    bits = pd.DataFrame([
        {"model": m, "train_seed": 0, "domain": "A", "document": 0, "condition": c, "nats": n, "bytes": 10}
        for m, values in (("good", {"A": 1.0, "B": 2.0, "C": 3.0, compare.NO_CODE: 0.5}),
                          ("bad", {"A": 3.0, "B": 1.0, "C": 2.0, compare.NO_CODE: 0.5}))
        for c, n in values.items()])
    rows = compare.attribution_rows(bits).set_index("model")
    assert rows.loc["good", "predicted"] == "A" and rows.loc["good", "true_rank"] == 1  # no code never competes
    assert rows.loc["bad", "predicted"] == "B" and rows.loc["bad", "true_rank"] == 3
    matrix = confusion_matrix(rows.reset_index().query("model == 'bad'"), ["A", "B", "C"])
    assert matrix.loc["A", "B"] == 1
    domains = compare.domain_bits(bits).set_index("model")
    assert domains.loc["bad", "best_wrong_code"] == "B"
    assert domains.loc["good", "no_code"] == pytest.approx(0.5 / 10 / math.log(2))


def test_compare_writes_each_part_once_and_combines_them(tmp_path):
    require_corpus("imdb")
    demo = REPO_ROOT / "models" / "ctrl-demo"
    config = compare.CompareConfig(eval_docs=1, max_chars=80, weights="float32")
    written = compare.compare({compare.DEMO: demo}, config, parts=["bits", "examples"], out=tmp_path)
    assert written == [tmp_path / compare.DEMO / "bits.csv", tmp_path / compare.DEMO / "examples.csv"]
    examples = compare.combined("examples", tmp_path)
    assert len(examples) == sum(len(codes) for _, codes in EXAMPLES) and examples["continuation"].notna().all()
    assert compare.compare({compare.DEMO: demo}, config, parts=["bits"], out=tmp_path) == []  # resumed: done
    bits = compare.combined("bits", tmp_path)
    assert list(bits.columns[:2]) == ["model", "train_seed"] and set(bits["model"]) == {compare.DEMO}
    assert bits["domain"].nunique() == 21 and (bits.groupby("domain").size() == 22).all()
    with pytest.raises(ValueError, match="unknown part"):
        compare.compare({compare.DEMO: demo}, config, parts=["vibes"], out=tmp_path)
    with pytest.raises(FileNotFoundError, match="no control-code model"):
        compare.compare({"missing": tmp_path / "nothing"}, config, parts=["bits"], out=tmp_path)
    assert compare.parts_of("ctrl-smollm2/seed-1") == compare.SEED_PARTS and compare.parts_of("ctrl-demo") == compare.PARTS


def test_a_text_past_the_context_is_scored_in_a_second_window(trained):  # noqa: F811
    loaded, _, texts, _ = trained
    limit = loaded.model.config.n_positions
    words = " ".join(texts.valid["Alpha"] * 12).split()
    text = next(" ".join(words[:n]) for n in range(1, len(words))  # longer than the context, within two windows
                if len(loaded.tokenizer(" ".join(words[:n]), add_special_tokens=False)["input_ids"]) >= limit + 4)
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert limit - 1 < len(ids) <= 2 * limit - 2
    bits = compare.code_bits(loaded.model, loaded.tokenizer, {"Alpha": [text], "Beta": [text]}, max_chars=len(text))
    first = bits[bits["domain"] == "Alpha"].set_index("condition")["nats"]
    head, _ = code_log_likelihoods(loaded.model, loaded.tokenizer, text, ["Alpha", "Beta"])  # cut to the context
    tail = first.loc["Alpha"] + head[0]
    assert tail > 0 and first.loc["Beta"] + head[1] == pytest.approx(tail, rel=1e-6)  # the same tail for both
    with pytest.raises(ValueError, match="two windows"):
        compare.window_log_likelihood(loaded.model, ids * 3, limit - 1, limit)
