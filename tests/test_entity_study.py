"""lmstudy.entity.study: both models start as the base, the tables' arithmetic, step timing,
and the whole pipeline on corpus slices from a tiny GPT-2 given by path (the ``init_from`` route)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.entity.data import EntityDocument, EntityLMTask
from lmstudy.entity.study import (
    MODELS, EntityStudyConfig, claims, compare_step_times, initial_model, without_entities,
)


def _base() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()


def test_both_models_start_as_the_base():
    base = _base()
    x = torch.randint(0, 50, (2, 12))
    entities = torch.randint(0, 3, (2, 12))
    expected = base(x).logits
    gpt2, gpt2e = (initial_model(base, name, seed=1).eval() for name in MODELS)
    assert not gpt2.has_entity_layers and gpt2e.has_entity_layers
    assert torch.allclose(gpt2(x).logits, expected, atol=1e-5)
    assert torch.allclose(gpt2e(x, entity_ids=entities).logits, expected, atol=1e-5)
    # The seed draws the new entity weights (and only those).
    other = initial_model(base, "GPT2E", seed=2)
    key_weights = [m.transformer.h[0].entity_attn.k_attn.weight for m in (other, gpt2e)]
    assert not torch.equal(*key_weights)
    with pytest.raises(ValueError, match="not one of"):
        initial_model(base, "BERT", seed=0)


def test_without_entities_keeps_tokens():
    doc = EntityDocument("d", [0, 4, 5], [0, 2, 2], [-1, 0, 1])
    (plain,) = without_entities([doc])
    assert plain.input_ids == doc.input_ids and plain.entity_ids == [0, 0, 0] and doc.entity_ids == [0, 2, 2]


def test_claims_verdicts():
    runs = pd.DataFrame({"model": ["GPT2"] * 3 + ["GPT2E"] * 3, "seed": [0, 1, 2] * 2,
                         "test_ppl": [20.0, 20.2, 19.8, 20.1, 20.0, 20.2],  # within noise: "similar" holds
                         "lambada_ppl": [300.0, 301.0, 299.0, 200.0, 201.0, 199.0]})  # clearly better
    timing = {"gpt2_seconds": 0.1, "gpt2e_seconds": 0.13, "overhead_pct": 30.0}
    index = pd.MultiIndex.from_product([["entity similarity", "mention similarity"], ["NN*", "PRP*"]])
    mean = pd.DataFrame({"GPT2": [0.0, 0.0, 0.5, 0.5], "GPT2E with entities": [0.0, 0.0, 0.6, 0.4]}, index=index)
    std = pd.DataFrame({"GPT2": [0.01] * 4, "GPT2E with entities": [0.01] * 3 + [0.2]}, index=index)
    n = pd.DataFrame({"GPT2": [3] * 4, "GPT2E with entities": [3] * 4}, index=index)
    similarity = pd.concat({"mean": mean, "std": std, "n": n}, axis=1)  # similarity_table's shape
    ner = pd.DataFrame({"model": ["GPT2"] * 3 + ["GPT2E"] * 3, "type": ["overall"] * 6,
                        "f1": [0.50, 0.52, 0.48, 0.49, 0.51, 0.50]})
    table = claims(runs, timing, similarity, ner)
    assert list(table.columns) == ["claim", "verdict", "evidence"]
    verdict = table.set_index("claim")["verdict"]
    assert verdict["similar perplexity in-domain (coref test)"] == "holds"
    assert verdict["better LAMBADA perplexity"] == "holds"
    assert verdict["small time overhead (paper +2.7%)"] == "does not hold"
    assert verdict["higher mention similarity (NN*)"] == "holds"
    assert verdict["higher mention similarity (PRP*)"] == "within noise"  # 0.1 lower, but a seed spread of 0.2
    assert verdict["better NER F1 (paper +3 points)"] == "within noise"
    evidence = table.set_index("claim")["evidence"]
    assert evidence["better LAMBADA perplexity"] == "GPT2 300.00 ± 1.00, GPT2E 200.00 ± 1.00"
    # "Similar" also holds beyond the noise when the gap is under 2%, and not at 2% or more.
    tight = runs.assign(test_ppl=[20.0, 20.01, 19.99, 20.3, 20.31, 20.29])  # +1.5%, far beyond a 0.01 spread
    assert claims(tight, timing, similarity, ner)["verdict"].iloc[0] == "holds"
    apart = runs.assign(test_ppl=[20.0, 20.01, 19.99, 20.5, 20.51, 20.49])  # +2.5%
    assert claims(apart, timing, similarity, ner)["verdict"].iloc[0] == "does not hold"


def test_similarity_table_is_mean_std_and_n_over_seeds(monkeypatch):
    from lmstudy.entity import study

    def fake_run(config, seed: int) -> dict:  # one value per setting, measure and group, as similarity_rows gives
        return {"rows": [{"setting": setting, "measure": measure, "group": group, "value": seed + 0.1 * i}
                         for i, setting in enumerate(study.SETTINGS) for measure in ("mention similarity",
                         "entity similarity") for group in ("NN*", "PRP*")]}

    monkeypatch.setattr(study, "similarity_run", fake_run)
    table = study.similarity_table(EntityStudyConfig(seeds=[0, 1, 2]))
    assert list(table.columns.get_level_values(0).unique()) == ["mean", "std", "n"]
    assert list(table["mean"].columns) == list(study.SETTINGS)  # the paper's column order
    key = ("mention similarity", "NN*")
    assert table["mean"].loc[key, "GPT2"] == pytest.approx(1.2) and table["std"].loc[key, "GPT2"] == pytest.approx(1.0)
    assert table["n"].loc[key, "GPT2"] == 3


def test_compare_step_times_alternates_on_the_same_batches():
    base = _base()
    models = {name: initial_model(base, name, seed=0) for name in MODELS}
    docs = [EntityDocument(f"d{i}", list(range(1, 30)), [i % 3] * 29, [-1] * 29) for i in range(4)]
    task = EntityLMTask(docs, docs[:1], batch_size=2, seq_len=8, pad_id=0)
    times = compare_step_times(models, task, steps=3, warmup=1)
    assert set(times) == set(MODELS) and all(len(t) == 3 and min(t) > 0 for t in times.values())


@pytest.mark.slow
def test_pipeline_end_to_end_on_corpus_slices(tmp_path, monkeypatch):
    from conftest import require_corpus

    from lmstudy.entity import study
    from lmstudy.tokenization import train_bpe

    for corpus in ("gum", "litbank", "lambada"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    # A tiny "pretrained GPT-2" given by path, with its tokenizer: the paper scale's init_from route.
    weights = tmp_path / "tiny-gpt2"
    tokenizer = train_bpe([doc_text for doc_text in ("The cat saw her sister . She smiled .",) * 50], 300)
    tokenizer.save_pretrained(str(weights))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(str(weights))
    config = EntityStudyConfig(
        init_from=str(weights), train_docs=1, eval_docs=1, seq_len=32, batch_size=2, finetune_steps=3, lr=1e-3,
        warmup_steps=1, eval_every=3, seeds=[0, 1], lambada_examples=5, timing_steps=2, similarity_docs=1,
        tsne_entities=3, ner_train_docs=1, ner_eval_docs=1, ner_hidden=8, ner_epochs=1,
    )
    runs = study.perplexity_runs(config)
    assert len(runs) == 4 and runs["test_ppl"].map(math.isfinite).all()
    assert runs["test_ppl_no_entities"].isna().tolist() == [True, False, True, False]  # GPT2E only
    assert ((runs["lambada_acc"] >= 0) & (runs["lambada_acc"] <= 1)).all()
    curves = study.loss_curves(config)
    assert set(curves["split"]) == {"training", "validation"} and set(curves["model"]) == set(MODELS)
    timing = study.step_time_run(config)
    assert timing["gpt2_seconds"] > 0 and timing["gpt2e_seconds"] > 0
    similarity = study.similarity_table(config)
    assert list(similarity["mean"].columns) == list(study.SETTINGS)
    assert similarity["mean"].loc[("mention similarity", "NN*")].between(-1, 1).all()
    frames = study.tsne_frames(config)
    assert set(frames) == {"GPT2", "GPT2E (with entities)"} and frames["GPT2"]["entity"].nunique() <= 3
    pd.testing.assert_frame_equal(study.tsne_frames(config)["GPT2"], frames["GPT2"])  # cached points
    ner = study.ner_table(config)
    assert set(ner["model"]) == set(MODELS) and (ner["type"] == "overall").sum() == 4
    table = claims(runs, timing, similarity, ner)
    assert len(table) == 6 and table["verdict"].isin(["holds", "does not hold", "within noise"]).all()
    again = study.perplexity_runs(config)  # cached: the same numbers, nothing retrained
    pd.testing.assert_frame_equal(again, runs)
