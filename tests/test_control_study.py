"""The control-code study's evaluation tables (lmstudy.ctrl.study) on a tiny two-domain model."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from lmstudy.ctrl.attribution import attribution_table
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.ctrl.study import (
    EMPTY,
    NEUTRAL_PROMPTS,
    attribution_examples,
    attribution_summary,
    code_perplexity_table,
    confusion_heatmap,
    confusion_matrix,
    controllability,
    decoding_settings,
    neutral_prompts,
    repetition_plot,
    repetition_stats,
    repetition_summary,
    repetition_sweep,
    side_by_side,
    train_domain_classifier,
)
from tests.test_control import ALPHA, BETA, trained  # noqa: F401  (trained: fixture, the tiny two-domain model)

def test_repetition_stats_by_hand():
    stats = repetition_stats([1, 2, 3, 4, 1, 2, 3, 4])
    assert stats["distinct_1"] == pytest.approx(4 / 8)
    assert stats["distinct_2"] == pytest.approx(4 / 7)  # (1,2) (2,3) (3,4) (4,1) and three repeats
    assert stats["repeated_4gram"] == pytest.approx(1 / 5)  # 5 four-grams, the last repeats the first
    fresh = repetition_stats([1, 2, 3, 4, 5])
    assert fresh["distinct_1"] == fresh["distinct_2"] == 1.0 and fresh["repeated_4gram"] == 0.0
    assert math.isnan(repetition_stats([1, 2])["repeated_4gram"])


def test_neutral_prompts_cut_short_on_request():
    assert neutral_prompts() == neutral_prompts(len(NEUTRAL_PROMPTS)) == NEUTRAL_PROMPTS
    assert neutral_prompts(1) == NEUTRAL_PROMPTS[:1]
    for bad in (-1, len(NEUTRAL_PROMPTS) + 1):
        with pytest.raises(ValueError, match="sweep_prompts must be between 0"):
            neutral_prompts(bad)


def test_perplexity_is_lowest_with_the_right_code(trained):
    loaded, _, texts, _ = trained
    table = code_perplexity_table(loaded.model, loaded.tokenizer, texts.valid, seq_len=32)
    assert table["domain"].tolist() == ["Alpha", "Beta"]
    assert (table["right_code"] < table["wrong_code_mean"]).all()
    assert (table["right_code"] < table["no_code"]).all()
    assert table["best_wrong_code"].tolist() == ["Beta", "Alpha"]  # with two codes, the other one
    assert (table["tokens"] > 0).all()


def test_attribution_summary_and_confusion_matrix():
    table = pd.DataFrame({"true_code": ["A", "A", "B", "B"], "predicted": ["A", "B", "B", "B"],
                          "true_rank": [1, 2, 1, 1], "correct": [True, False, True, True]})
    summary = attribution_summary(table).set_index("true_code")
    assert summary.loc["A", "top1"] == 0.5 and summary.loc["B", "top1"] == 1.0
    assert summary.loc["all", "top1"] == 0.75 and summary.loc["all", "top3"] == 1.0
    assert summary.loc["all", "chance_top1"] == 0.5 and summary.loc["all", "chance_top3"] == 1.0
    matrix = confusion_matrix(table, ["A", "B", "C"])
    assert matrix.loc["A", "A"] == 0.5 and matrix.loc["A", "B"] == 0.5 and matrix.loc["B", "B"] == 1.0
    assert matrix.loc["C"].sum() == 0.0  # a code without documents: an empty row, not NaN
    figure = confusion_heatmap(matrix, title="t")
    assert isinstance(figure, plt.Figure)
    plt.close(figure)


def test_attribution_on_the_tiny_model_is_perfect(trained):
    loaded, _, texts, _ = trained
    summary = attribution_summary(attribution_table(loaded.model, loaded.tokenizer, texts.valid))
    assert summary.set_index("true_code").loc["all", "top1"] == 1.0


def test_attribution_examples_rank_the_sources_of_each_statement(trained):
    loaded, _, texts, _ = trained
    statements = [texts.valid["Alpha"][0][:40], texts.valid["Beta"][0][:40]]
    table = attribution_examples(loaded.model, loaded.tokenizer, statements, top=2)
    assert table.columns.tolist() == ["statement", "source_1", "p_1", "source_2", "p_2"]
    assert table["source_1"].tolist() == ["Alpha", "Beta"]  # each held-out statement to its own domain
    assert (table["p_1"] + table["p_2"]).tolist() == pytest.approx([1.0, 1.0])  # two codes: the whole posterior
    assert (table["p_1"] >= table["p_2"]).all()


def test_side_by_side_and_controllability(trained):
    loaded, _, texts, _ = trained
    table = side_by_side(loaded.model, loaded.tokenizer, "pear", ["Alpha", "Beta"],
                         SamplingConfig(greedy=True), max_new_tokens=12)
    assert table["code"].tolist() == ["Alpha", "Beta"] and (table["prompt"] == "pear").all()
    # The codes steer, even against a fruit prompt: Alpha continues with fruit, Beta with machine parts.
    assert any(word in table.loc[0, "continuation"] for word in ALPHA)
    assert any(word in table.loc[1, "continuation"] for word in BETA)

    classifier = train_domain_classifier(texts.valid)
    generations, summary = controllability(loaded.model, loaded.tokenizer, classifier, ["Alpha", "Beta"],
                                           prompts=["pear", "gear"], max_new_tokens=12, seeds=(0, 1))
    assert len(generations) == 2 * 2 * 2 and set(generations["predicted"]) <= {"Alpha", "Beta", EMPTY}
    assert summary["generations"].tolist() == [4, 4] and (summary["chance"] == 0.5).all()
    assert (summary["accuracy"] > 0.5).all()
    with pytest.raises(ValueError, match="two domains"):
        train_domain_classifier({"Alpha": texts.valid["Alpha"]})


def test_repetition_sweep_penalty_reduces_repetition(trained):
    loaded, *_ = trained
    settings = decoding_settings(thetas=(1.0, 3.0))
    assert list(settings) == ["greedy", "greedy + ctrl θ=1", "greedy + ctrl θ=3", "greedy + hf θ=1.2",
                              "nucleus p=0.9"]
    sweep = repetition_sweep(loaded.model, loaded.tokenizer, ["Alpha", "Beta"], prompts=["pear"],
                             settings=settings, max_new_tokens=25)
    assert len(sweep) == 5 * 2 and (sweep["tokens"] == 25).all()  # eos does not cut the sweep short
    assert sweep["continuation"].str.len().gt(0).all()  # the texts are kept (the judged sweep scores them)
    summary = repetition_summary(sweep).set_index("setting")
    assert list(summary.index) == list(settings)
    # θ = 1 is greedy itself; a strong penalty leaves fewer repeated 4-grams and more distinct tokens.
    assert summary.loc["greedy + ctrl θ=1"].equals(summary.loc["greedy"])
    assert summary.loc["greedy + ctrl θ=3", "distinct_1"] > summary.loc["greedy", "distinct_1"]
    assert summary.loc["greedy + ctrl θ=3", "repeated_4gram"] <= summary.loc["greedy", "repeated_4gram"]
    assert (summary["perplexity"] > 1.0).all()
    figure = repetition_plot(summary.reset_index())
    assert isinstance(figure, plt.Figure)
    plt.close(figure)


# --------------------------------------------------------------------------------------------
# the judge (lmstudy.ctrl.quality) and the claims (lmstudy.ctrl.claims)


def test_bits_per_byte_batched_equals_one_by_one_and_by_hand(trained):
    import torch

    from lmstudy.ctrl.quality import bits_per_byte

    loaded, *_ = trained  # the tiny model judges (any causal LM with its tokenizer does)
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts, texts = ["pear", "gear", "pear"], [" apple plum.", " bolt nut gear bolt.", ""]
    batched = bits_per_byte(model, tokenizer, prompts, texts, batch_size=2)
    alone = [bits_per_byte(model, tokenizer, [p], [t])[0] for p, t in zip(prompts, texts)]
    assert batched[:2] == pytest.approx(alone[:2], rel=1e-5)
    assert math.isnan(batched[2]) and math.isnan(alone[2])  # an empty continuation has no bytes
    prefix = [tokenizer.eos_token_id] + tokenizer("pear", add_special_tokens=False)["input_ids"]  # no bos: eos
    target = tokenizer(" apple plum.", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=torch.tensor([prefix + target])).logits[0], dim=-1)
    nats = -sum(float(log_probs[len(prefix) - 1 + i, token]) for i, token in enumerate(target))
    assert batched[0] == pytest.approx(nats / math.log(2) / len(" apple plum.".encode()), rel=1e-5)


def _committed_tables():
    from lmstudy.ctrl.claims import read_tables

    tables = read_tables()
    if any(tables[name] is None for name in ("perplexity", "attribution", "controllability", "repetition", "mixing",
                                             "links", "attribution_examples")):
        pytest.skip("the study's committed tables are not here")
    return tables


def test_claims_from_the_committed_tables_read_every_claim_once_per_arm():
    from lmstudy.claims import NOT_RUN, RULE
    from lmstudy.ctrl.claims import claims

    table = claims(_committed_tables())
    assert table.attrs["rule"] == RULE
    assert not table.duplicated(["claim", "level"]).any()
    assert set(table["level"]) == {"from_base", "scratch"}
    steering = table[table["claim"].str.startswith("Control codes govern")]
    assert len(steering) == 6 and (steering["seeds"] == 21).all()  # 3 comparisons x 2 arms, the 21 domains
    assert table[table["verdict"] == NOT_RUN]["note"].notna().all()
    scratch_judged = table[(table["level"] == "scratch") & table["claim"].str.contains("SmolLM2")]
    assert (scratch_judged["verdict"] == NOT_RUN).all() and len(scratch_judged) == 2  # no weights, no texts


def test_claims_without_the_judged_tables_say_how_to_make_them():
    from lmstudy.claims import NOT_RUN, ONE_SEED
    from lmstudy.ctrl.claims import claims

    tables = {**_committed_tables(), "quality": None, "ratings": None}
    table = claims(tables).set_index(["claim", "level"])
    missing = table[table["note"].fillna("").str.contains("python -m lmstudy ctrl quality")]
    assert len(missing) == 4 and (missing["verdict"] == NOT_RUN).all()  # 2 judged + 2 Rating: rows
    repeat = table.xs("from_base", level="level")
    repeat = repeat[repeat.index.str.contains("prevents the repetitions")]
    assert repeat["verdict"].tolist() == [ONE_SEED]  # the published sweep kept one mean per rule


def test_link_claim_counts_a_value_named_under_its_own_url_only():
    from lmstudy.claims import HOLDS, WITHIN_NOISE
    from lmstudy.ctrl.claims import link_rows

    links = pd.DataFrame({"probe": ["topic"] * 3, "value": ["grain", "crude", "acq"],
                          "continuation": ["grain prices rose", "crude oil fell", "the company said"],
                          "overlap": [0.1, 0.2, 0.1], "mentions": [1.0, 1.0, 0.0]})
    steered, changed = link_rows(links, "")
    assert steered.effect.mean == pytest.approx(2 / 3) and steered.effect.n == 3
    assert changed.verdict == HOLDS
    # The same value named under every URL is no steering at all.
    everywhere = links.assign(continuation=["grain", "grain", "grain"], mentions=[1.0, 0.0, 0.0])
    steered, _ = link_rows(everywhere, "")
    assert steered.effect.mean == pytest.approx(0.0) and steered.verdict == WITHIN_NOISE
