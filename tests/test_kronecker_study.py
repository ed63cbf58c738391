"""The Krony study (lmstudy.krony): size-class shapes, the dense baselines' width and the narrowed student, the config's
errors, the continued-training recipe, the distillation loss and task, the claims on synthetic numbers, and an
end-to-end smoke run on the smoke base (LAMBADA and WikiText scoring: tests/test_evaluation.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy import base
from lmstudy.krony import baselines, bases, order, reconstruction, runs, study_tables
from lmstudy.krony import claims as krony_claims
from lmstudy.krony.baselines import hidden_unit_scores, narrow_config, narrowed_model
from lmstudy.krony.claims import claims
from lmstudy.krony.classes import class_a_shape, class_width, matched_dense_inner, max_factors
from lmstudy.krony.config import LABELS, STUDY, KronyConfig, ModelSpec
from lmstudy.krony.distillation import DistillTask, distillation_loss
from lmstudy.krony.model import KroneckerConfig, compressed_parameter_count, gpt2_parameter_count
from lmstudy.krony.reconstruction import reconstruction_errors
from lmstudy.krony.study_tables import trend_gaps
from lmstudy.claims import RULE, VERDICTS, differences
from lmstudy.scales import preset
from lmstudy.second_worker import walk_from_the_end
from lmstudy.training import count_parameters

SMALL = GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                   attn_pdrop=0.0)


def smoke_config(**changes) -> KronyConfig:
    return KronyConfig(**{**preset("03_kronecker", "smoke"), **changes})


def test_class_shapes_are_the_papers_for_gpt2_small_and_fit_small_models():
    # GPT-2 small: the 96M and 81M classes are exactly Table 1's (1536, 768) and (768, 768).
    assert class_a_shape("96M", 768) == (1536, 768)
    assert class_a_shape("81M", 768) == (768, 768)
    assert class_a_shape("67M", 32) == (8, 4)  # divisors of 128 and 32 nearest their square roots
    assert class_a_shape("67M", 192) == (24, 12)  # the cpu base: B = (32, 16)
    small = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    sizes = [compressed_parameter_count(small, KroneckerConfig(class_a_shape(c, 32))) for c in ("96M", "81M", "67M")]
    assert sizes[0] > sizes[1] > sizes[2]  # the classes shrink in the paper's order
    with pytest.raises(ValueError, match="unknown size class"):
        class_a_shape("50M", 32)
    # Van Loan terms each class allows: rank of R(W) = min(|A|, |B|).
    assert (max_factors("96M", 192), max_factors("81M", 192), max_factors("67M", 192)) == (2, 4, 288)


def test_matched_dense_inner_is_the_closest_size():
    config = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    target = compressed_parameter_count(config, KroneckerConfig((32, 32)))
    inner = matched_dense_inner(config, target)
    size = gpt2_parameter_count(GPT2Config(**{**config.to_dict(), "n_inner": inner}))
    per_unit = config.n_layer * (2 * config.n_embd + 1)  # one MLP hidden unit per block: two weights + a bias
    assert abs(size - target) <= per_unit / 2 and inner < 4 * config.n_embd
    assert class_width(config, "81M") == inner  # the 81M class is A = (d, d)
    # the same as scanning every size (below, inside and above the range; ties go to the smaller size)
    def scan(target: int) -> int:
        return min(range(1, 4 * config.n_embd + 1), key=lambda inner: abs(
            gpt2_parameter_count(GPT2Config(**{**config.to_dict(), "n_inner": inner})) - target))
    low = gpt2_parameter_count(GPT2Config(**{**config.to_dict(), "n_inner": 1}))
    for target in (0, low, low + per_unit // 2, low + per_unit // 2 + 1, target, target + 7, 10 ** 9):
        assert matched_dense_inner(config, target) == scan(target), target


def test_narrowed_student_keeps_the_largest_units_and_has_the_matched_count():
    torch.manual_seed(0)
    teacher = GPT2LMHeadModel(SMALL).eval()
    inner = 4 * SMALL.n_embd
    chosen = {0: [3, 17, 40, 63], 1: [0, 5, 6, 50]}
    with torch.no_grad():
        for index, units in chosen.items():
            mlp = teacher.transformer.h[index].mlp
            mlp.c_fc.weight[:, units] *= 10  # (d, inner): these units' input weights ...
            mlp.c_proj.weight[units, :] *= 10  # (inner, d): ... and output weights are 10x larger
    target = count_parameters(teacher) - SMALL.n_layer * (inner - 4) * (2 * SMALL.n_embd + 1)
    width = matched_dense_inner(teacher.config, target)
    assert width == 4
    student = narrowed_model(teacher, width)
    assert student.config.n_inner == 4
    assert count_parameters(student) == gpt2_parameter_count(narrow_config(SMALL, 4)) == target
    for index, units in chosen.items():
        old, new = teacher.transformer.h[index].mlp, student.transformer.h[index].mlp
        assert hidden_unit_scores(old).topk(4).indices.sort().values.tolist() == units
        assert torch.equal(new.c_fc.weight, old.c_fc.weight[:, units])
        assert torch.equal(new.c_fc.bias, old.c_fc.bias[units])
        assert torch.equal(new.c_proj.weight, old.c_proj.weight[units, :])
        assert torch.equal(new.c_proj.bias, old.c_proj.bias)
    assert torch.equal(student.transformer.wte.weight, teacher.transformer.wte.weight)
    assert student.lm_head.weight.data_ptr() == student.transformer.wte.weight.data_ptr()  # still tied
    # All units kept: the same function.
    ids = torch.randint(50, (2, 8))
    with torch.no_grad():
        assert torch.allclose(narrowed_model(teacher, inner)(ids).logits, teacher(ids).logits, atol=1e-6)
    with pytest.raises(ValueError, match="n_inner"):
        narrowed_model(teacher, inner + 1)


def test_config_errors_are_clear():
    config = smoke_config()
    assert config.finetune_steps == 4  # 2,048 tokens of 8 x 64
    with pytest.raises(ValueError, match="unknown size class"):  # a typo in a preset fails before any training
        smoke_config(compare_class="81m")
    with pytest.raises(ValueError, match="less than one step"):
        smoke_config(finetune_tokens=100)
    with pytest.raises(ValueError, match="kept checkpoints"):
        smoke_config(fractions=[0.5])
    with pytest.raises(ValueError, match="allows 1 to 2 factors"):
        smoke_config(table6_class="96M")  # B = (2, 1): at most two Van Loan terms, the preset asks for 4
    with pytest.raises(ValueError, match="inits"):
        smoke_config(inits=["svd"])
    with pytest.raises(ValueError, match="base_scale"):
        smoke_config(base_scale="laptop")
    with pytest.raises(ValueError, match="evals_per_run"):
        smoke_config(evals_per_run=5)
    with pytest.raises(ValueError, match="unknown model kind"):
        ModelSpec("pruned", "81M")
    with pytest.raises(ValueError, match="needs an init"):
        ModelSpec("krony", "81M")
    with pytest.raises(ValueError, match="dense"):
        ModelSpec("distilled", "81M", init="van_loan")
    assert ModelSpec("krony", "67M", "random").seeded_init and not ModelSpec("krony", "67M", "van_loan").seeded_init


def test_every_preset_is_a_valid_config():
    for scale in ("smoke", "cpu", "paper"):
        config = KronyConfig(**preset("03_kronecker", scale))
        assert config.finetune_steps >= config.evals_per_run
    assert KronyConfig(**preset("03_kronecker", "cpu")).finetune_steps == 80


def test_continued_training_follows_the_base_recipe():
    config = smoke_config()
    recipe = config.recipe
    train_config = runs.finetune_train_config(config, seed=1)
    assert train_config.max_steps == 4 and train_config.eval_every == 2 and train_config.seed == 1
    assert train_config.lr == config.finetune_lr and train_config.lr_schedule == "cosine"
    assert train_config.weight_decay == recipe.weight_decay and train_config.betas == (0.9, 0.95)


def synthetic_trend() -> pd.DataFrame:
    """Three checkpoints x three seeds: Krony behind distilled at the first, level in the middle, ahead at the
    last; always ahead of scratch. LAMBADA's perplexity follows the bits per byte (10 ** bpb)."""
    krony_gap = {1_000: 0.10, 3_000: 0.0, 10_000: -0.10}  # Krony minus distilled, bits per byte
    rows = []
    for tokens, gap in krony_gap.items():
        for seed, noise in zip((0, 1, 2), (-0.01, 0.0, 0.01)):
            distilled = 2.0 + noise
            for model, bpb in (("Krony", distilled + gap + 2 * noise), ("distilled", distilled),
                               ("scratch, equal data", distilled + 0.5)):
                rows.append({"fraction": tokens / 10_000, "base_tokens": tokens, "seed": seed, "model": model,
                             "init": "van_loan" if model == "Krony" else None, "wikitext_bpb": bpb,
                             "lambada_ppl": 10 ** bpb})
    return pd.DataFrame(rows)


def test_trend_gaps_are_krony_minus_each_baseline_per_seed():
    gaps = trend_gaps(synthetic_trend())
    assert len(gaps) == 9
    first = gaps[(gaps["base_tokens"] == 1_000) & (gaps["seed"] == 2)].iloc[0]
    assert first["krony_minus_distilled"] == pytest.approx(0.12)
    assert first["krony_minus_scratch"] == pytest.approx(0.12 - 0.5)


def synthetic_grid(**validation) -> pd.DataFrame:
    """The 81M Krony rows of a grid: test bits per byte and validation losses (``validation``: init -> loss)."""
    losses = {"van_loan": 4.0, "prune": 4.2, "random": 4.1, **validation}
    return pd.DataFrame([{"model": "Krony", "class": "81M", "init": init, "wikitext_bpb": bpb,
                          "best_val_loss": losses[init]}
                         for init, bpb in (("van_loan", 2.0), ("prune", 2.2), ("random", 2.1))])


OUTPERFORMS = "Our 81M model variant outperforms distilgpt2 on all standard language modeling datasets"


def test_claims_on_synthetic_numbers():
    config = smoke_config(classes=["81M"], table6_factors=[1, 4])
    table6 = pd.DataFrame([{"factors": 1, "scalars": False, "wikitext_bpb": 2.3},
                           {"factors": 1, "scalars": True, "wikitext_bpb": 2.31},
                           {"factors": 4, "scalars": False, "wikitext_bpb": 2.25}])  # 4 with scalars: not run
    table = claims(config, synthetic_grid(), table6, synthetic_trend())
    assert table.attrs["rule"] == RULE
    wikitext = table[(table["claim"] == OUTPERFORMS) & (table["dataset"] == "WikiText-2 test")]
    assert wikitext["verdict"].tolist() == ["does not hold", "within noise", "holds"]  # per checkpoint, by tokens
    assert wikitext["level"].tolist() == [1_000, 3_000, 10_000]
    # From -5% to +5% over one decade:
    assert set(wikitext["trend"]) == {"toward the paper: slope +9.99 [+8.19, +11.80] per decade"}
    first = wikitext.iloc[0]
    assert first["ours"] == "Krony 2.1000 ± 0.0300 vs distilled 2.0000 ± 0.0100 bits/byte"
    # The effect: per seed, distilled minus Krony in % of distilled's bits per byte, paired t over the 3 seeds.
    per_seed = [100 * -(0.1 + 2 * noise) / (2.0 + noise) for noise in (-0.01, 0.0, 0.01)]
    assert first["effect"] == differences(per_seed).format() and first["seeds"] == 3
    assert "Krony init van_loan: the grid's lowest validation loss" in first["note"]
    assert "test bits per byte picks the same" in first["note"]
    assert "Table 4" in first["paper"] and "34.99" in first["paper"] and "+1.16%" in first["paper"]
    # LAMBADA: the paper's Table 4 numbers beside ours, compared as log perplexities.
    lambada = table[(table["claim"] == OUTPERFORMS) & (table["dataset"] == "LAMBADA")]
    assert lambada["verdict"].tolist() == ["does not hold", "within noise", "holds"]
    assert set(lambada["paper"]) == {"KronyPT-81M-3950 64.92 vs DistilGPT2 76.00 LAMBADA perplexity (Table 4): "
                                     "+3.64%"}
    scratch = table[table["claim"].str.startswith("A fair comparison")]
    assert scratch["verdict"].tolist() == ["holds"] * 3
    rows = table.set_index(["claim", "dataset"])
    assert rows.loc[(OUTPERFORMS, "WikiText-103"), "verdict"] == "not run"
    # One seed: the number is shown, no verdict (the grid and Table 6 ran seed 0 only).
    by_claim = table.drop_duplicates("claim", keep=False).set_index("claim")
    van_loan = by_claim.filter(like="Van Loan init", axis=0).iloc[0]
    assert van_loan["verdict"] == "one seed" and van_loan["effect"] == f"{100 * 0.1 / 2.1:+.2f}"
    assert by_claim.filter(like="pruning-based", axis=0)["verdict"].tolist() == ["one seed"]
    factors = by_claim.loc["Adding multiple factors do not help much (Sec. 4.4): 4 factors vs 1, 67M class"]
    assert factors["verdict"] == "one seed" and "equivalence within ± 1%" in factors["note"]
    scalars = [c for c in by_claim.index if c.startswith("Adding scalars")]
    assert by_claim.loc[scalars, "verdict"].tolist() == ["one seed", "not run"]  # no 4-factor row with scalars
    assert by_claim.filter(like="converge to around 4", axis=0)["verdict"].tolist() == ["not run"]
    distillation = table[table["claim"].str.startswith("Distillation")]
    assert distillation["dataset"].tolist() == ["WikiText-2 test", "LAMBADA"]
    assert distillation["verdict"].tolist() == ["not run", "not run"]  # no model of ours trained both ways
    assert "git tag legacy-old-base" in distillation["note"].iloc[0]
    assert not (set(table["verdict"]) - set(VERDICTS))


def test_claims_note_an_init_the_test_set_would_have_chosen_differently():
    config = smoke_config(classes=["81M"], table6_factors=[1])
    table6 = pd.DataFrame([{"factors": 1, "scalars": s, "wikitext_bpb": 2.3} for s in (False, True)])
    grid = synthetic_grid(van_loan=4.3)  # validation: random (4.1); test bits per byte: van_loan (2.0)
    note = claims(config, grid, table6, synthetic_trend())["note"].iloc[0]
    assert "test bits per byte would pick van_loan" in note
    assert "the trend ran van_loan, not the validation choice random: rerun it" in note


def test_percent_effect_pairs_shared_seeds_else_welch_else_one_seed():
    krony = pd.Series({0: 1.0, 1: 2.0, 2: 3.0})
    other = pd.Series({0: 2.0, 1: 4.0, 2: 6.0})
    assert krony_claims.percent_ahead(krony, other).tolist() == [50.0, 50.0, 50.0]
    assert krony_claims.percent_effect(krony, other).format() == "+50.00 [+50.00, +50.00]"
    assert krony_claims.percent_effect(krony, pd.Series({5: 4.0})).format() == "+50.00"  # one value: no interval
    welch = krony_claims.percent_effect(pd.Series({0: 1.0, 1: 3.0}), pd.Series({7: 4.0, 8: 4.0}))
    assert welch.method == "Welch t" and welch.mean == pytest.approx(50.0)
    assert krony_claims.percent_ahead(pd.Series({0: math.e}), pd.Series({0: math.e ** 2}), log=True).iloc[0] == \
        pytest.approx(50.0)


def test_best_init_is_the_lowest_validation_loss_of_the_class_not_the_test_score():
    grid = pd.DataFrame([{"model": "base", "class": None, "init": None, "wikitext_bpb": 1.0, "best_val_loss": 3.0},
                         {"model": "Krony", "class": "81M", "init": "van_loan", "wikitext_bpb": 2.1,
                          "best_val_loss": 4.0},
                         {"model": "Krony", "class": "81M", "init": "prune", "wikitext_bpb": 2.0,
                          "best_val_loss": 4.1},
                         {"model": "Krony", "class": "67M", "init": "random", "wikitext_bpb": 1.5,
                          "best_val_loss": 3.5}])
    assert study_tables.best_init(grid, "81M") == "van_loan"
    assert study_tables.best_init(grid, "81M", metric="wikitext_bpb") == "prune"
    with pytest.raises(ValueError, match="no Krony row"):
        study_tables.best_init(grid, "96M")


def test_the_published_claims_state_the_papers_conclusions():
    """The committed cpu tables (figures/03_krony_*.csv) through claims: validation picks the trend's init, the
    factors claim reads as the paper concludes, LAMBADA has its verdicts."""
    table = krony_claims.published_claims()
    assert "picks the same" in table["note"].iloc[0]  # validation and test both pick pruning
    assert not table["claim"].str.contains("beat 1").any()
    assert table["claim"].str.contains("do not help much").sum() == 2
    lambada = table[(table["claim"] == OUTPERFORMS) & (table["dataset"] == "LAMBADA")]
    assert lambada["verdict"].iloc[-1] == "does not hold" and lambada["ours"].iloc[-1].startswith("Krony 820.3")


def test_protocol_metrics_flatten_the_protocol_table(monkeypatch):
    table = pd.DataFrame([
        {"benchmark": "wikitext2", "ppl_token": 300.0, "ppl_word": 9000.0, "bits_per_byte": 2.2},
        {"benchmark": "lambada", "ppl_token": 700.0, "ppl_word": 6e5, "bits_per_byte": 2.9, "accuracy": 0.01,
         "accuracy_low": 0.0, "accuracy_high": 0.05},
        {"benchmark": "news", "ppl_token": 120.0, "ppl_word": 5000.0, "bits_per_byte": 2.0},
    ])
    monkeypatch.setattr(runs, "evaluate_model", lambda model, tokenizer, config: table)
    metrics = runs.protocol_metrics(None, None, smoke_config())
    assert metrics["wikitext_bpb"] == 2.2 and metrics["wikitext_ppl_word"] == 9000.0  # the studies' "wikitext" keys
    assert metrics["news_ppl"] == 120.0 and metrics["lambada_ppl"] == 700.0 and metrics["lambada_acc_high"] == 0.05


def test_squared_singular_values_from_the_gram_matrix_equal_the_svds():
    generator = torch.Generator().manual_seed(0)
    for shape in [(48, 12), (12, 48), (30, 30)]:
        matrix = torch.randn(shape, dtype=torch.float64, generator=generator)
        expected = torch.linalg.svdvals(matrix) ** 2
        assert torch.allclose(reconstruction._squared_singular_values(matrix), expected, rtol=1e-10, atol=1e-10)


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


def test_train_runs_trains_the_krony_models_then_the_baselines_which_a_second_worker_takes_from_the_end(
        monkeypatch):
    config = smoke_config(fractions=[0.1, 1.0], seeds=[0, 1], classes=["81M"], inits=["van_loan", "random"],
                          table6_factors=[1])
    calls = []

    def models_at(config, fraction, specs, seed, desc):
        calls.extend((fraction, seed, spec) for spec in specs)
        return [{"model": LABELS[s.kind], "class": s.size_class, "init": s.init,
                 "best_val_loss": 1.0 if s.init == "random" else 2.0, "wikitext_bpb": 2.0} for s in specs]

    def continued_run(config, fraction, spec, seed):
        calls.append((fraction, seed, spec))

    monkeypatch.setattr(order, "models_at", models_at)
    monkeypatch.setattr(order, "continued_run", continued_run)
    order.train_runs(config)
    kinds = [spec.kind for _, _, spec in calls]
    first_dense = kinds.index("distilled")
    assert set(kinds[:first_dense]) == {"krony"} and "krony" not in kinds[first_dense:]
    dense = calls[first_dense:]
    assert [(spec.kind, fraction, seed) for fraction, seed, spec in dense] == [
        (kind, fraction, seed) for kind in ("distilled", "scratch") for fraction in (0.1, 1.0) for seed in (0, 1)]
    # Every run the grid, Table 6 and the trend (with the grid's best init on validation, random here) read,
    # and no other.
    needed = {(1.0, 0, spec) for spec in runs.grid_specs(config) + runs.table6_specs(config)}
    needed |= {(f, seed, spec) for f in config.fractions for seed in config.seeds
               for spec in runs.trend_specs(config, "random")}
    assert set(calls) == needed  # (the trend's Krony run at the final checkpoint and first seed is the grid's, cached)
    calls.clear()
    parameters = {**preset("03_kronecker", "smoke"), "fractions": [0.1, 1.0], "seeds": [0, 1], "classes": ["81M"],
                  "inits": ["van_loan", "random"], "table6_factors": [1], "scale": "smoke"}
    walk_from_the_end(order.study_run_list(parameters))  # `lmstudy study 03_kronecker --second-worker`
    assert calls == dense[::-1]


def test_krony_scratch_trains_the_scratch_pretraining_alone_with_the_studys_parameters(monkeypatch):
    from lmstudy.__main__ import main

    calls = []
    monkeypatch.setattr(baselines, "scratch_pretraining", lambda config: calls.append(config.fractions)
                        or {"steps": 1, "tokens": 2, "parameters": 3, "val_loss": 4.0})
    assert main(["krony", "scratch", "--scale", "smoke", "-p", "fractions", "[0.1, 1.0]"]) == 0
    assert calls == [[0.1, 1.0]]  # the -p values reach the config


def test_the_dense_baselines_need_the_bases_data_run_not_the_trained_base(monkeypatch, tmp_path):
    from types import SimpleNamespace

    config = smoke_config()
    expected = baselines.dense_config(config).to_dict(), baselines.dense_width(config)
    bases.shared_base(config, config.fractions[0]).tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    # A data run holding that tokenizer, and no base: the scratch arm's pretraining can start beside the base's.
    monkeypatch.setattr(baselines, "finished_data_run", lambda data: SimpleNamespace(path=tmp_path))
    monkeypatch.setattr(baselines, "shared_base", lambda *args: pytest.fail("the trained base was read"))
    assert (baselines.dense_config(config).to_dict(), baselines.dense_width(config)) == expected


def test_scratch_checkpoint_is_read_once_written_before_the_run_ends(tmp_path, monkeypatch):
    from safetensors.torch import save_model

    from lmstudy.runs import get_run

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path))
    config = smoke_config()
    monkeypatch.setattr(baselines, "dense_config", lambda config: SMALL)
    monkeypatch.setattr(baselines, "scratch_identity", lambda config: {"stage": "scratch_pretraining", "test": 1})
    run = get_run(STUDY, baselines.scratch_identity(config))
    steps = config.recipe.kept_steps()
    torch.manual_seed(0)
    weights = GPT2LMHeadModel(SMALL)

    def write_checkpoint(fraction):
        folder = run.checkpoint_dir / f"step-{steps[fraction]:09d}"
        folder.mkdir(parents=True)
        save_model(weights, str(folder / "model.safetensors"))
        (folder / "state.json").write_text("{}")

    def pretrain_the_rest(config):  # the whole run, as scratch_pretraining would (or would wait for)
        pretrained.append(True)
        write_checkpoint(1.0)

    pretrained = []
    monkeypatch.setattr(baselines, "scratch_pretraining", pretrain_the_rest)
    write_checkpoint(0.1)
    model = baselines.scratch_checkpoint(config, 0.1)  # the run is not done: its 10% checkpoint is there
    assert not pretrained and not run.done
    expected = weights.transformer.wte.weight.detach().to(torch.float16).float()
    assert torch.equal(model.transformer.wte.weight, expected)
    baselines.scratch_checkpoint(config, 1.0)  # not written yet: trained (or waited for) first
    assert pretrained == [True]


@pytest.fixture
def fresh_base_cache():
    """The bases (lmstudy.base.loaded_study_base) and the study's streams are kept per process: forget them before
    and after a test that moves the run cache."""
    base._loaded_study_base.cache_clear()
    bases._streams.cache_clear()
    yield
    base._loaded_study_base.cache_clear()
    bases._streams.cache_clear()


@pytest.mark.slow
def test_end_to_end_on_the_smoke_base(tmp_path, monkeypatch, fresh_base_cache, capsys):
    from conftest import require_corpus, runs_sharing_corpus_caches

    for corpus in ("wikipedia", "litbank", "reddit", "imdb", "reuters21578", "bbc_news", "irc", "wikitext-2-raw",
                   "lambada"):
        require_corpus(corpus)
    # Fresh run folders sharing the corpus caches, no shipped smoke models.
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path / "models"))
    config = smoke_config(fractions=[0.1, 1.0], classes=["81M", "67M"], inits=["van_loan", "random"],
                          table6_factors=[1, 2], domains=[])

    # The dense baselines first, as a second worker beside the study does (`lmstudy study 03_kronecker
    # --second-worker`: the baselines from the end of the list, so the scratch arm's pretraining first): the study
    # then reads them back.
    import json

    from lmstudy import second_worker
    from lmstudy.__main__ import main
    from lmstudy.runs import get_run

    assert second_worker.main(["03_kronecker", "--scale", "smoke", "--overrides", json.dumps(
        {"compare_class": "81M", "fractions": [0.1, 1.0], "domains": []})]) == 0
    assert get_run(STUDY, baselines.scratch_identity(config)).done
    with monkeypatch.context() as nothing_to_train:
        nothing_to_train.setattr(runs, "train_and_restore", None)
        order.baseline_runs(config)
    assert main(["krony", "scratch", "--scale", "smoke", "-p", "no_such_key", "1"]) == 2

    grid = study_tables.grid_table(config)
    assert grid["model"].tolist() == ["base"] + ["Krony"] * 4 + ["distilled", "scratch, equal data"]
    krony81 = grid[(grid["model"] == "Krony") & (grid["class"] == "81M")].iloc[0]
    dense = grid[grid["model"] != "Krony"].iloc[1:]
    per_unit = config.recipe.model.n_layer * (2 * config.recipe.model.n_embd + 1)
    assert (abs(dense["parameters"] - krony81["parameters"]) <= per_unit / 2).all()  # the matched size
    assert grid[["wikitext_bpb", "before_wikitext_bpb", "lambada_acc"]].iloc[1:].notna().all().all()
    init = study_tables.best_init(grid, "81M")

    trend = study_tables.trend_table(config, init)
    assert len(trend) == 2 * 2 * 3 and set(trend["base_tokens"]) == {1024, 10240}
    # Seed 0 of the final checkpoint is the grid's run, read back from the cache.
    final = trend[(trend["fraction"] == 1.0) & (trend["seed"] == 0)].set_index("model")
    assert final.loc["distilled", "wikitext_bpb"] == grid.set_index("model").loc["distilled", "wikitext_bpb"]
    # Equal data: the scratch model was pretrained with the base's recipe and kept the base's checkpoints.
    scratch = baselines.scratch_pretraining(config)
    assert scratch["steps"] == config.recipe.max_steps and scratch["n_inner"] == baselines.dense_width(config)
    # The distilled student starts as the narrowed base, better than the scratch model at 10% of its budget.
    assert trend["before_wikitext_bpb"].notna().all()

    rows = study_tables.table6(config)
    assert rows[["factors", "scalars"]].values.tolist() == [[1, False], [1, True], [2, False], [2, True]]
    assert rows["parameters"].iloc[2] > rows["parameters"].iloc[0]
    table = claims(config, grid, rows, trend)
    assert set(table["verdict"]) <= set(VERDICTS)
    assert (table["dataset"] == "WikiText-2 test").groupby(table["claim"]).sum()[OUTPERFORMS] == 2  # per checkpoint

    # A rerun trains nothing: every stage is read back from the run cache.
    monkeypatch.setattr(runs, "train_and_restore", None)
    monkeypatch.setattr(baselines, "train", None)
    assert study_tables.trend_table(config, init).equals(trend)

    # scripts/gpu_krony_tables.py (a GPU lease's tables, drawn here from its runs' metrics) reads the same tables
    # back from the run cache with no base loaded.
    import runpy
    from pathlib import Path

    for module, loader in ((runs, "shared_base"), (runs, "load_base"), (baselines, "shared_base")):
        monkeypatch.setattr(module, loader, None)
    tables = runpy.run_path(str(Path(__file__).parents[1] / "scripts" / "gpu_krony_tables.py"))
    out = tmp_path / "tables"
    assert tables["main"]([str(out), "--scale", "smoke", "-p", "fractions", "[0.1, 1.0]", "-p", "classes",
                           "[81M, 67M]", "-p", "inits", "[van_loan, random]", "-p", "table6_factors", "[1, 2]",
                           "-p", "domains", "[]"]) == 0
    for name, expected in {"grid": grid, "table6": rows, "trend": trend}.items():
        read = pd.read_csv(out / f"03_krony_{name}.csv")["wikitext_bpb"].tolist()
        assert read == pytest.approx(expected["wikitext_bpb"].tolist(), rel=1e-12)
    assert pd.read_csv(out / "03_krony_claims.csv")["verdict"].tolist() == table["verdict"].tolist()

    # A continued run that a lease's time cap stopped is named and left out (NaN), not an error: one scratch run
    # made unfinished, its row of the trend reads NaN and the other models' rows stay as they were.
    import json

    from lmstudy.runs import METRICS_FILE, runs_dir

    def is_continued_scratch(config_file: Path) -> bool:
        run_config = json.loads(config_file.read_text())
        return run_config.get("stage") == "continued" and run_config["model"]["kind"] == "scratch"

    stopped = next(path.parent for path in sorted((runs_dir() / STUDY).glob("*/config.json"))
                   if is_continued_scratch(path))
    (stopped / METRICS_FILE).rename(stopped / "metrics.stopped")
    capsys.readouterr()
    assert tables["main"]([str(out), "--scale", "smoke", "-p", "fractions", "[0.1, 1.0]", "-p", "classes",
                           "[81M, 67M]", "-p", "inits", "[van_loan, random]", "-p", "table6_factors", "[1, 2]",
                           "-p", "domains", "[]"]) == 0
    assert f"not finished, left out: {stopped.name} (scratch 81M" in capsys.readouterr().out
    read = pd.read_csv(out / "03_krony_trend.csv")
    assert read["wikitext_bpb"].isna().sum() == 1
    assert read[read["model"] == "scratch, equal data"]["wikitext_bpb"].isna().sum() == 1
    kept = read["wikitext_bpb"].notna()
    assert read["wikitext_bpb"][kept].tolist() == pytest.approx(trend["wikitext_bpb"][kept].tolist(), rel=1e-12)
    (stopped / "metrics.stopped").rename(stopped / METRICS_FILE)
