"""lmstudy.studies.kronecker: size-class shapes, the dense baseline's size, LAMBADA scoring, reconstruction errors,
and a two-step end-to-end run on slices of the real corpora."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.models.kronecker import KroneckerConfig, compressed_parameter_count, gpt2_parameter_count
from lmstudy.studies.kronecker import (
    KronyStudyConfig, class_a_shape, compressed_run, lambada_scores, matched_dense_inner, pretrain_base,
    reconstruction_errors, results_table,
)


def test_class_shapes_are_the_papers_for_gpt2_small_and_fit_small_models():
    # GPT-2 small: the 96M and 81M classes are exactly Table 1's (1536, 768) and (768, 768).
    assert class_a_shape("96M", 768) == (1536, 768)
    assert class_a_shape("81M", 768) == (768, 768)
    assert class_a_shape("67M", 32) == (8, 4)  # divisors of 128 and 32 nearest their square roots
    small = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    sizes = [compressed_parameter_count(small, KroneckerConfig(class_a_shape(c, 32))) for c in ("96M", "81M", "67M")]
    assert sizes[0] > sizes[1] > sizes[2]  # the classes shrink in the paper's order
    with pytest.raises(ValueError, match="unknown size class"):
        class_a_shape("50M", 32)


def test_matched_dense_inner_is_the_closest_size():
    config = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    target = compressed_parameter_count(config, KroneckerConfig((32, 32)))
    inner = matched_dense_inner(config, target)
    size = gpt2_parameter_count(GPT2Config(**{**config.to_dict(), "n_inner": inner}))
    per_unit = config.n_layer * (2 * config.n_embd + 1)  # one MLP hidden unit per block: two weights + a bias
    assert abs(size - target) <= per_unit / 2 and inner < 4 * config.n_embd


class _NextId(torch.nn.Module):
    """A fake LM that predicts ``x[t] + 1`` (mod V) with certainty: checks the target alignment."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.full((*input_ids.shape, self.vocab), -30.0)
        logits.scatter_(-1, ((input_ids + 1) % self.vocab)[..., None], 30.0)
        return type("Out", (), {"logits": logits})


def test_lambada_scores_align_targets_with_predictions():
    model = _NextId()
    right = ([1, 2, 3], [4, 5])  # the fake model predicts 4 after 3 and 5 after 4
    wrong = ([1, 2, 3], [4, 9])
    scores = lambada_scores(model, [right], seq_len=8)
    assert scores["lambada_acc"] == 1.0 and scores["lambada_ppl"] == pytest.approx(1.0, abs=1e-6)
    scores = lambada_scores(model, [right, wrong], seq_len=4)  # context truncated on the left, target kept
    assert scores["lambada_acc"] == 0.5 and scores["lambada_ppl"] > 1e6


def test_van_loan_error_meets_the_svd_bound():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=2, n_head=2))
    errors = reconstruction_errors(model, ["96M", "81M", "67M"])
    assert len(errors) == 2 * 2 * 3
    assert torch.allclose(torch.tensor(errors["van_loan_error"].values), torch.tensor(errors["svd_bound"].values),
                          atol=1e-9)
    assert ((errors["van_loan_error"] > 0) & (errors["van_loan_error"] < 1)).all()
    # Fewer parameters, worse fit: the error grows from the 96M to the 67M class in every layer.
    pivot = errors.pivot_table(index=["layer", "matrix"], columns="class", values="van_loan_error")
    assert ((pivot["96M"] < pivot["81M"]) & (pivot["81M"] < pivot["67M"])).all()


def test_end_to_end_on_corpus_slices(tmp_path, monkeypatch):
    from conftest import require_corpus

    for corpus in ("wikipedia", "wikitext-2-raw", "lambada"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    config = KronyStudyConfig(
        vocab_size=300, train_docs=5, valid_docs=2, n_layer=1, n_head=2, n_embd=16, seq_len=32, batch_size=4,
        pretrain_steps=3, lr=3e-3, classes=["81M"], inits=["van_loan"], finetune_steps=2, eval_every=2,
        wikitext_tokens=200, lambada_examples=5,
    )
    base = pretrain_base(config)
    assert base["steps"] == 3 and math.isfinite(base["wikitext_ppl"]) and 0 <= base["lambada_acc"] <= 1
    krony = compressed_run(config, "81M", "van_loan")
    assert krony["steps"] == 2 and krony["parameters"] < base["parameters"]
    assert krony["a_shape"] == [16, 16] and math.isfinite(krony["before_wikitext_ppl"])
    table = results_table(config)  # everything cached except the dense baseline
    assert list(table["model"]) == ["base (dense)", "Krony", table["model"].iloc[2]]
    assert table["model"].iloc[2].startswith("dense, same size")
    assert abs(table["parameters"].iloc[2] - krony["parameters"]) < 0.05 * krony["parameters"]
