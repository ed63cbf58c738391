"""lmstudy.krony.study: size-class shapes, the dense baseline's size, reconstruction errors, the
distillation loss and task, and a two-step end-to-end run on slices of the real corpora (LAMBADA and
WikiText scoring: tests/test_evaluation.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.krony.model import KroneckerConfig, compressed_parameter_count, gpt2_parameter_count
from lmstudy.krony.study import (
    DistillTask, KronyStudyConfig, claims, class_a_shape, compressed_run, distillation_loss,
    matched_dense_inner, pretrain_base, reconstruction_errors, results_table,
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
    with pytest.raises(ValueError, match="unknown size class"):  # a typo in a preset fails before any training
        KronyStudyConfig(vocab_size=300, train_docs=1, valid_docs=1, n_layer=1, n_head=1, n_embd=8, seq_len=8,
                         batch_size=2, pretrain_steps=1, lr=1e-3, baseline_classes=["81m"])


def test_claims_compare_the_best_krony_model_with_each_baseline():
    def row(model: str, size_class: str, init: str, wikitext: float) -> dict:
        return {"model": model, "class": size_class, "init": init, "wikitext_ppl": wikitext,
                "lambada_ppl": 2 * wikitext}

    results = pd.DataFrame([row("base (dense)", "", "", 100.0), row("Krony", "81M", "van_loan", 130.0),
                            row("Krony", "81M", "prune", 120.0), row("dense, same size", "81M", "scratch", 125.0),
                            row("distilled", "81M", "scratch, KD from base", 110.0),
                            row("Krony", "67M", "prune", 150.0)])
    table = claims(results, ["81M", "67M"])
    assert list(table.columns) == ["claim", "verdict", "evidence"]
    assert table["verdict"].tolist() == ["holds", "does not hold", "not run", "not run"]
    assert table["evidence"].iloc[0] == ("Krony (prune) wikitext ppl 120.0 vs dense, same size 125.0; "
                                         "LAMBADA ppl 240.0 vs 250.0")  # the best init of the class
    assert "110.0" in table["evidence"].iloc[1]


def test_matched_dense_inner_is_the_closest_size():
    config = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    target = compressed_parameter_count(config, KroneckerConfig((32, 32)))
    inner = matched_dense_inner(config, target)
    size = gpt2_parameter_count(GPT2Config(**{**config.to_dict(), "n_inner": inner}))
    per_unit = config.n_layer * (2 * config.n_embd + 1)  # one MLP hidden unit per block: two weights + a bias
    assert abs(size - target) <= per_unit / 2 and inner < 4 * config.n_embd


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


def test_distillation_loss_equals_the_hand_computed_value():
    # One token, three classes, written out with math only: T = 2, alpha = 0.25, target 2.
    student, teacher, target, alpha, temperature = [1.0, 2.0, 0.5], [3.0, 0.0, 1.0], 2, 0.25, 2.0

    def softmax(logits, t):
        exps = [math.exp(v / t) for v in logits]
        return [e / sum(exps) for e in exps]

    p_teacher, p_student = softmax(teacher, temperature), softmax(student, temperature)
    kl = sum(pt * (math.log(pt) - math.log(ps)) for pt, ps in zip(p_teacher, p_student))
    ce = -math.log(softmax(student, 1.0)[target])
    expected = alpha * kl * temperature**2 + (1 - alpha) * ce
    loss, parts = distillation_loss(torch.tensor([[student]]), torch.tensor([[teacher]]), torch.tensor([[target]]),
                                    alpha, temperature)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert parts["kd"].item() == pytest.approx(kl * temperature**2, rel=1e-5)
    assert parts["ce"].item() == pytest.approx(ce, rel=1e-5)


def test_distillation_loss_is_ce_at_alpha_0_and_zero_kd_for_its_own_teacher():
    generator = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 5, 11, generator=generator), torch.randn(2, 5, 11, generator=generator)
    targets = torch.randint(11, (2, 5), generator=generator)
    ce = torch.nn.functional.cross_entropy(student.reshape(-1, 11), targets.reshape(-1))
    loss, _ = distillation_loss(student, teacher, targets, alpha=0.0, temperature=3.0)
    assert loss.item() == pytest.approx(ce.item(), rel=1e-6)
    loss, parts = distillation_loss(student, student, targets, alpha=1.0, temperature=3.0)
    assert abs(loss.item()) < 1e-6 and abs(parts["kd"].item()) < 1e-6  # the teacher's own distribution: no KL
    loss, parts = distillation_loss(student, teacher, targets, alpha=0.5, temperature=1.0)
    assert loss.item() == pytest.approx(0.5 * parts["kd"].item() + 0.5 * parts["ce"].item(), rel=1e-6)
    assert parts["kd"].item() > 0


def test_distill_task_trains_the_student_only():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout: the loss can be recomputed
    teacher, student = GPT2LMHeadModel(config).train(), GPT2LMHeadModel(GPT2Config(**{**config.to_dict(), "n_inner": 8}))
    ids = torch.randint(40, (400,))
    task = DistillTask(ids, ids[:50], batch_size=2, seq_len=8, teacher=teacher, alpha=0.5, temperature=2.0)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    batch = next(iter(task.batches(0)))
    loss, parts = task.loss(student, batch)
    loss.backward()
    assert all(p.grad is not None for p in student.parameters())
    assert all(p.grad is None for p in teacher.parameters())
    x, y = batch
    with torch.no_grad():
        expected, _ = distillation_loss(student(input_ids=x).logits, teacher(input_ids=x).logits, y, 0.5, 2.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert set(parts) == {"kd", "ce"} and "val_loss" in task.evaluate(student)  # evaluation: the plain LM loss
    with pytest.raises(ValueError, match="teacher"):
        DistillTask(ids, ids[:50], batch_size=2, seq_len=8)


def test_end_to_end_on_corpus_slices(tmp_path, monkeypatch):
    from conftest import require_corpus

    for corpus in ("wikipedia", "wikitext-2-raw", "lambada"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    config = KronyStudyConfig(
        vocab_size=300, train_docs=5, valid_docs=2, n_layer=1, n_head=2, n_embd=16, seq_len=32, batch_size=4,
        pretrain_steps=3, lr=3e-3, classes=["81M"], inits=["van_loan"], finetune_steps=2, eval_every=2,
        baseline_classes=["81M"], wikitext_tokens=200, lambada_examples=5,
    )
    base = pretrain_base(config)
    assert base["steps"] == 3 and math.isfinite(base["wikitext_ppl"]) and 0 <= base["lambada_acc"] <= 1
    # the shared protocol's extra keys: per word, bits per byte, the accuracy's Wilson interval
    assert base["wikitext_ppl_word"] > base["wikitext_ppl"] and 0 < base["wikitext_bpb"] < 16
    assert base["lambada_acc_low"] <= base["lambada_acc"] <= base["lambada_acc_high"]
    krony = compressed_run(config, "81M", "van_loan")
    assert krony["steps"] == 2 and krony["parameters"] < base["parameters"]
    assert krony["a_shape"] == [16, 16] and math.isfinite(krony["before_wikitext_ppl"])
    table = results_table(config)  # everything cached except the dense and distilled students
    assert list(table["model"]) == ["base (dense)", "Krony", "dense, same size", "distilled"]
    dense, distilled = table.iloc[2], table.iloc[3]
    assert abs(dense["parameters"] - krony["parameters"]) < 0.05 * krony["parameters"]
    assert distilled["parameters"] == dense["parameters"] and distilled["n_inner"] == dense["n_inner"]
    assert math.isfinite(distilled["wikitext_ppl"]) and distilled["wikitext_ppl"] != dense["wikitext_ppl"]
