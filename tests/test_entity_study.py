"""The entity study (lmstudy.entity's config, documents, runs, timing, similarity, ner, claims, export): every
model starts as the base, the recipe, the trend's and the ablations' tables and verdicts, step timing with FLOPs,
the Hugging Face export, and the whole pipeline on corpus slices from a tiny GPT-2 given by path (the ``init_from``
route)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from safetensors.torch import load_model
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.base import StudyBase
from lmstudy.claims import VERDICTS
from lmstudy.entity import config as study_config
from lmstudy.entity import documents, export, ner, runs, similarity
from lmstudy.entity import timing as timing_module
from lmstudy.entity.claims import ablation_table, claims, trend_gaps
from lmstudy.entity.config import ABLATIONS, MODELS, STUDY, VARIANTS, EntityStudyConfig
from lmstudy.entity.data import EntityDocument, EntityLMTask
from lmstudy.entity.documents import without_entities
from lmstudy.entity.model import GPT2E, GPT2EConfig
from lmstudy.entity.runs import initial_model, train_config
from lmstudy.entity.timing import compare_step_times, step_time_table
from lmstudy.runs import get_run
from lmstudy.checkpoints import kept_checkpoint


def _base() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                      bos_token_id=0, eos_token_id=0)).eval()


def test_every_model_starts_as_the_base():
    base = _base()
    x = torch.randint(0, 50, (2, 12))
    entities = torch.randint(0, 3, (2, 12))
    expected = base(x).logits
    models = {name: initial_model(base, name, seed=1).eval() for name in VARIANTS}
    assert [m.has_entity_layers for m in models.values()] == [False, True, True, True]
    for name, model in models.items():
        assert torch.allclose(model(x, entity_ids=entities).logits, expected, atol=1e-5), name
    assert {name: (m.config.entity_init, m.config.memory_update) for name, m in models.items()} == {
        "GPT2": ("ones", "chunk"), "GPT2E": ("ones", "chunk"), "GPT2E learned init": ("learned", "chunk"),
        "GPT2E per-mention": ("ones", "mention")}
    # The seed draws the new entity weights (and only those).
    other = initial_model(base, "GPT2E", seed=2)
    key_weights = [m.transformer.h[0].entity_attn.k_attn.weight for m in (other, models["GPT2E"])]
    assert not torch.equal(*key_weights)
    with pytest.raises(ValueError, match="not one of"):
        initial_model(base, "BERT", seed=0)



def test_a_seed_draws_the_same_model_and_random_state_every_time():
    """The run cache's runs were made from initial_model's draws: a second build draws them again, the same."""
    base = _base()
    for name in VARIANTS:
        first = initial_model(base, name, seed=3)
        state_after_first = torch.get_rng_state()
        torch.manual_seed(123)  # anything in between
        again = initial_model(base, name, seed=3)
        assert torch.equal(torch.get_rng_state(), state_after_first)
        for key, value in first.state_dict().items():
            assert torch.equal(value, again.state_dict()[key]), (name, key)
        assert again.lm_head.weight is again.transformer.wte.weight


def test_without_entities_keeps_tokens():
    doc = EntityDocument("d", [0, 4, 5], [0, 2, 2], [-1, 0, 1])
    (plain,) = without_entities([doc])
    assert plain.input_ids == doc.input_ids and plain.entity_ids == [0, 0, 0] and doc.entity_ids == [0, 2, 2]


def test_max_doc_tokens_cuts_every_document_and_enters_the_runs_identity_only_when_set(monkeypatch):
    docs = [EntityDocument("d", list(range(10)), [0, 1] * 5, list(range(10)))]
    monkeypatch.setattr(documents, "encoded_split", lambda corpus, split, limit, tokenizer: docs)
    cut = documents.study_documents(EntityStudyConfig(corpora=["gum"], max_doc_tokens=4), tokenizer=None)
    for split in ("train", "valid", "test"):
        assert [(d.input_ids, d.entity_ids, d.word_index) for d in cut[split]] == [([0, 1, 2, 3], [0, 1, 0, 1],
                                                                                     [0, 1, 2, 3])]
    assert documents.study_documents(EntityStudyConfig(corpora=["gum"]), tokenizer=None)["test"] == docs
    monkeypatch.setattr(study_config, "load_base", lambda config: SimpleNamespace(identity="base"))
    assert "max_doc_tokens" not in EntityStudyConfig().finetune_identity()  # the runs cached before it existed
    assert EntityStudyConfig(max_doc_tokens=4).finetune_identity()["max_doc_tokens"] == 4


def test_ner_documents_are_cut_after_the_last_sentence_within_max_doc_tokens(monkeypatch):
    from lmstudy.data.readers.coref import CorefDocument, Mention

    tokens = ["Ann", "saw", "Bob", ".", "He", "left", ".", "She", "stayed", "."]
    doc = CorefDocument("d", "test", tokens, [0, 4, 7], None, [Mention(0, 1, 1), Mention(4, 5, 2), Mention(7, 8, 1)])
    monkeypatch.setattr(documents, "coref_split", lambda corpus, split, limit: [doc])
    tokenizer = ByteTokenizer()
    monkeypatch.setattr(documents, "encoded_split", lambda corpus, split, limit, tok: [
        documents.encode_coref_document(d, tok) for d in documents.coref_split(corpus, split, limit)])
    assert documents.ner_split(EntityStudyConfig(), "test", tokenizer)[0] == [doc]
    # "Ann saw Bob . He left ." is 23 characters: with the leading end-of-text, the first 24 sub-tokens hold the
    # first two sentences; a cut inside the first sentence keeps it whole
    for n_subtokens, n_words in ((24, 7), (23, 4), (3, 4)):
        (coref,), (encoded,) = documents.ner_split(EntityStudyConfig(max_doc_tokens=n_subtokens), "test", tokenizer)
        assert coref.tokens == tokens[:n_words] and encoded == documents.encode_coref_document(coref, tokenizer)
        assert [m.end <= n_words for m in coref.mentions] == [True] * len(coref.mentions)


class ByteTokenizer:
    """A tokenizer of one sub-token per character, with offsets (what ``encode_coref_document`` reads)."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        return {"input_ids": [ord(c) for c in text], "offset_mapping": [(i, i + 1) for i in range(len(text))]}


def test_recipe_keeps_the_budgets_checkpoints_at_a_constant_learning_rate():
    config = EntityStudyConfig(budgets=[5, 20, 80], eval_every=10, warmup_steps=4, seq_len=32, batch_size=2)
    recipe = train_config(config, seed=3)
    assert recipe.max_steps == config.finetune_steps == 80 and recipe.keep_checkpoints == (5, 20, 80)
    assert recipe.lr_schedule == "constant" and recipe.warmup_steps == 4 and recipe.seed == 3
    assert recipe.early_stopping_patience is None  # the run must reach every budget (best weights still kept)
    assert config.tokens_per_step == 64
    for budgets in ([], [8, 4], [4, 4], [0, 4]):
        with pytest.raises(ValueError, match="budgets"):
            EntityStudyConfig(budgets=budgets)


def _similarity() -> pd.DataFrame:
    """Per-seed Table 4 rows (similarity_seeds' shape): GPT2E's NN* mentions 0.05 more similar than GPT2's in
    every seed; PRP* 0.01 lower on average but ±0.2 from seed to seed."""
    rows = []
    for seed, noise in zip((0, 1, 2), (-0.01, 0.0, 0.01)):
        for setting, nn, prp in (("GPT2", 0.5, 0.5), ("GPT2E with entities", 0.55, 0.49 + 20 * noise)):
            for measure in ("mention similarity", "entity similarity"):
                rows += [{"seed": seed, "group": "NN*", "measure": measure, "setting": setting, "value": nn + noise},
                         {"seed": seed, "group": "PRP*", "measure": measure, "setting": setting, "value": prp}]
    return pd.DataFrame(rows)


def _ner(per_gain: float = 0.001) -> pd.DataFrame:
    """Overall F1 level within noise; PER F1 higher by ``per_gain`` for GPT2E in every seed; VEH never found."""
    rows = []
    for seed, overall in zip((0, 1, 2), ((0.50, 0.49), (0.52, 0.51), (0.48, 0.50))):
        for model, f1 in zip(MODELS, overall):
            rows += [{"model": model, "seed": seed, "type": "overall", "f1": f1, "support": 100},
                     {"model": model, "seed": seed, "type": "PER", "support": 80,
                      "f1": 0.4 + 0.01 * seed + (per_gain if model == "GPT2E" else 0.0)},
                     {"model": model, "seed": seed, "type": "VEH", "f1": 0.0, "support": 12}]
    return pd.DataFrame(rows)


TIMING = {"seconds": {"GPT2": 0.1, "GPT2E": 0.13}, "overhead_pct": {"GPT2": 0.0, "GPT2E": 30.0},
          "flops_per_token": {"GPT2": 1e6, "GPT2E": 1.2e6}, "flops_overhead_pct": {"GPT2": 0.0, "GPT2E": 20.0},
          "steps": 4, "threads": 2, "device": "cpu", "batch": [8, 256]}


def _runs(gpt2e_test_ppl) -> pd.DataFrame:
    return pd.DataFrame({"model": ["GPT2"] * 3 + ["GPT2E"] * 3, "seed": [0, 1, 2] * 2,
                         "test_ppl": [20.0, 20.2, 19.8, *gpt2e_test_ppl],
                         "lambada_ppl": [300.0, 301.0, 299.0, 200.0, 201.0, 199.0]})  # clearly better


def test_claims_verdicts_through_the_one_rule():
    runs = _runs([20.05, 20.25, 19.85])  # +0.25% in every seed: similar within the 2% margin
    table = claims(runs, step_time_table(TIMING), _similarity(), _ner())
    assert list(table.columns) == ["claim", "dataset", "paper", "ours", "effect", "seeds", "verdict", "note"]
    verdict = table.set_index("claim")["verdict"]
    assert verdict["GPT2E and GPT2 show similar performances (perplexity) in-domain"] == "holds"
    assert verdict["GPT2E has a slight advantage in perplexity on LAMBADA"] == "holds"
    # one timing run: no interval, so no verdict; the number is still shown (10% bound minus +30%)
    time = table.set_index("claim").loc[
        "GPT2E has a small computational cost that translates into a slightly longer training time"]
    assert time["verdict"] == "one seed" and time["effect"] == "-20.0"
    assert time["ours"].startswith("GPT2 0.100 s, GPT2E 0.130 s a step: +30.0% (FLOPs +20.0%")
    assert verdict["GPT2E mentions have a higher average similarity than GPT2's (NN*)"] == "holds"
    assert verdict["GPT2E mentions have a higher average similarity than GPT2's (PRP*)"] == "within noise"
    assert verdict["NER with GPT2E representations: a 3% F1 increase over GPT2"] == "within noise"
    # PER: +0.1 F1 point in every seed, clear of zero but under the 0.5-point threshold
    assert verdict["PERSON: one of the greatest F1 increases with GPT2E"] == "negligible"
    product = table.set_index("claim").loc["PRODUCT: one of the greatest F1 increases with GPT2E"]
    assert product["verdict"] == "not run" and "no PRODUCT type" in product["note"] and "12 test spans" in product["note"]
    assert table.set_index("claim").loc["GPT2E has a slight advantage in perplexity on LAMBADA", "ours"] == (
        "GPT2 300.00 ± 1.00, GPT2E 200.00 ± 1.00")
    assert (table["paper"] != "").all()  # the paper's number beside every claim
    # "similar" is an equivalence claim: +3% in every seed lies wholly outside ±2%; seeds that disagree by more
    # than the margin cannot tell
    assert claims(_runs([20.6, 20.806, 20.394]), step_time_table(TIMING), _similarity(), _ner())[
        "verdict"].iloc[0] == "does not hold"
    assert claims(_runs([20.1, 20.0, 20.6]), step_time_table(TIMING), _similarity(), _ner())[
        "verdict"].iloc[0] == "within noise"
    assert claims(runs, step_time_table(TIMING), _similarity(), _ner(per_gain=0.02)).set_index("claim").loc[
        "PERSON: one of the greatest F1 increases with GPT2E", "verdict"] == "holds"


def fake_trend() -> pd.DataFrame:
    """GPT2E's entity gap grows with the budget (-0.1, -1, -3 ppl, seed noise ±0.1 around it); GPT2E against
    GPT2: level at first, better at the end."""
    rows = []
    for seed, noise in zip((0, 1, 2), (-0.1, 0.0, 0.1)):
        for step, gpt2, gpt2e, gap in ((10, 50.0, 50.0, -0.1), (40, 40.0, 39.5, -1.0), (160, 35.0, 32.0, -3.0)):
            rows.append({"model": "GPT2", "seed": seed, "step": step, "tokens": 100 * step, "test_ppl": gpt2 + noise,
                         "test_ppl_no_entities": math.nan})
            rows.append({"model": "GPT2E", "seed": seed, "step": step, "tokens": 100 * step,
                         "test_ppl": gpt2e + noise, "test_ppl_no_entities": gpt2e - gap + 2 * noise})
    return pd.DataFrame(rows)


def test_trend_gaps_are_paired_by_seed_and_the_claims_give_a_verdict_per_budget_and_a_direction():
    gaps = trend_gaps(fake_trend())
    assert list(gaps.columns) == ["step", "tokens", "seed", "entity_gap", "model_gap"] and len(gaps) == 9
    first = gaps[(gaps["step"] == 10) & (gaps["seed"] == 2)].iloc[0]
    assert first["entity_gap"] == pytest.approx(-0.1 - 0.1) and first["model_gap"] == pytest.approx(0.0)
    table = claims(_runs([20.05, 20.25, 19.85]), step_time_table(TIMING), _similarity(), _ner(), fake_trend())
    assert list(table.columns) == ["claim", "dataset", "level", "paper", "ours", "effect", "seeds", "verdict",
                                   "trend", "note"]
    uses = table[table["claim"].str.startswith("GPT2E uses the entities")]
    assert uses["level"].tolist() == [10, 40, 160]
    # at 10 steps the gap (+0.1, ±0.1 over seeds) is within noise; later it holds, and it moves toward the paper
    assert uses["verdict"].tolist() == ["within noise", "holds", "holds"]
    assert uses["trend"].str.startswith("toward the paper").all()
    assert uses["ours"].iloc[1] == "gold 39.50 ± 0.10, null 40.50 ± 0.20"
    assert uses["effect"].iloc[1] == "+1.00 [+0.75, +1.25]"  # paired t: 1.00 ± t(0.975, 2) · 0.1 / √3
    better = table[table["claim"].str.startswith("GPT2E has lower test ppl than GPT2")]
    assert better["verdict"].tolist() == ["within noise", "holds", "holds"]  # exactly level at first
    assert better["trend"].str.startswith("toward the paper").all()


def test_a_consistent_gap_under_a_tenth_of_a_percent_of_the_perplexity_is_negligible():
    # the published 960-step entity gap: null entities 0.06-0.08 ppl better than gold in every seed, at ppl ~120
    trend = fake_trend()
    gpt2e = trend["model"] == "GPT2E"
    trend.loc[gpt2e, "test_ppl"] = 120.0 + trend.loc[gpt2e, "seed"]
    trend.loc[gpt2e, "test_ppl_no_entities"] = trend.loc[gpt2e, "test_ppl"] - [0.07, 0.06, 0.08] * 3
    table = claims(_runs([20.05, 20.25, 19.85]), step_time_table(TIMING), _similarity(), _ner(), trend)
    uses = table[table["claim"].str.startswith("GPT2E uses the entities")]
    assert set(uses["verdict"]) == {"negligible"}  # clear of zero (against the paper) but under 0.1% of ppl
    assert uses["note"].iloc[0].startswith("effect: ppl points; negligible under 0.")


def test_ablation_table_compares_each_variant_with_gpt2e_paired_by_seed():
    rows = []
    for seed, noise in zip((0, 1, 2), (-0.2, 0.0, 0.2)):
        for name, gold, null in (("GPT2E", 30.0, 31.0), ("GPT2E learned init", 30.05 + noise / 20, 31.0),
                                 ("GPT2E per-mention", 28.0, 31.0)):
            rows.append({"model": name, "seed": seed, "test_ppl": gold + noise, "test_ppl_no_entities": null + noise})
    rows.append({"model": "GPT2E learned init", "seed": 3, "test_ppl": 99.0, "test_ppl_no_entities": 99.0})  # unpaired
    table = ablation_table(pd.DataFrame(rows)).set_index("model")
    assert list(table.index) == ["GPT2E", *ABLATIONS]
    assert table.loc["GPT2E", "test ppl (gold entities)"] == "30.00 ± 0.20"
    assert table.loc["GPT2E per-mention", "gold - null"] == "-3.00 ± 0.00"
    # paired by seed: the seed noise cancels, so +2 with no spread holds, and a 0.05 loss (0.17% of the ppl,
    # over the 0.1% threshold) with a small spread does not hold; seed 3 has no GPT2E pair and is left out
    assert table.loc["GPT2E per-mention", "GPT2E - variant (gold) [95% CI]"] == "+2.0000 [+2.0000, +2.0000]"
    assert table.loc["GPT2E per-mention", "variant lowers test ppl"] == "holds"
    assert table.loc["GPT2E learned init", "variant lowers test ppl"] == "does not hold"
    assert pd.isna(table.loc["GPT2E", "variant lowers test ppl"])
    assert table["seeds"].tolist() == [3, 4, 3]


def test_the_published_tables_are_rebuilt_from_the_committed_files():
    """The committed ablation table is ablation_table's on the committed runs, the per-seed Table 4 CSV is the
    archived similarity runs', and its summary is the committed Table 4 (nothing retrained)."""
    from lmstudy.entity.claims import published_ablation
    from lmstudy.paths import figures_dir

    figures = figures_dir()
    for prefix, init_from in (("02_entity_", None), ("02_entity_smollm2_", "smollm2")):  # our base's, SmolLM2's
        committed = pd.read_csv(figures / f"{prefix}ablation.csv")
        rebuilt = pd.read_csv(__import__("io").StringIO(published_ablation(prefix).to_csv(index=False)))
        pd.testing.assert_frame_equal(committed, rebuilt)
        seeds = similarity.archived_similarity_seeds(init_from=init_from)
        pd.testing.assert_frame_equal(pd.read_csv(figures / f"{prefix}similarity_seeds.csv"), seeds)
        summary = pd.read_csv(figures / f"{prefix}similarity.csv", header=[0, 1], index_col=[0, 1])
        assert similarity.similarity_summary(seeds).to_numpy() == pytest.approx(summary.to_numpy(), abs=1e-12)
    runs = pd.concat([pd.read_csv(figures / "02_entity_runs.csv"), pd.read_csv(figures / "02_entity_ablation_runs.csv")])
    assert len(runs.drop_duplicates(["model", "seed"])) == 12 and set(runs["best_step"]) == {420}  # README's count


def test_step_time_table_puts_the_flop_ratio_beside_the_measured_one():
    table = step_time_table(TIMING).set_index("model")
    assert table.loc["GPT2E", "time overhead %"] == 30.0 and table.loc["GPT2E", "FLOP overhead %"] == 20.0
    assert table.loc["paper GPT2E", "time overhead %"] == pytest.approx(100 * (0.298 / 0.290 - 1))
    assert table.loc["GPT2", "where"] == "cpu, 2 thread(s), batch 8 x 256"


def test_similarity_table_is_mean_std_and_n_over_seeds(monkeypatch):
    def fake_run(config, seed: int) -> dict:  # one value per setting, measure and group, as similarity_rows gives
        return {"rows": [{"setting": setting, "measure": measure, "group": group, "value": seed + 0.1 * i}
                         for i, setting in enumerate(similarity.SETTINGS) for measure in ("mention similarity",
                         "entity similarity") for group in ("NN*", "PRP*")]}

    monkeypatch.setattr(similarity, "similarity_run", fake_run)
    table = similarity.similarity_table(EntityStudyConfig(seeds=[0, 1, 2]))
    assert list(table.columns.get_level_values(0).unique()) == ["mean", "std", "n"]
    assert list(table["mean"].columns) == list(similarity.SETTINGS)  # the paper's column order
    key = ("mention similarity", "NN*")
    assert table["mean"].loc[key, "GPT2"] == pytest.approx(1.2) and table["std"].loc[key, "GPT2"] == pytest.approx(1.0)
    assert table["n"].loc[key, "GPT2"] == 3


def test_compare_step_times_alternates_on_the_same_batches():
    base = _base()
    models = {name: initial_model(base, name, seed=0) for name in VARIANTS}
    docs = [EntityDocument(f"d{i}", list(range(1, 30)), [i % 3] * 29, [-1] * 29) for i in range(4)]
    task = EntityLMTask(docs, docs[:1], batch_size=2, seq_len=8, pad_id=0)
    times = compare_step_times(models, task, steps=3, warmup=1)
    assert set(times) == set(VARIANTS) and all(len(t) == 3 and min(t) > 0 for t in times.values())


def _tiny_tokenizer():
    from lmstudy.tokenization import train_bpe

    return train_bpe(["The cat saw her sister . She smiled ."] * 50, 300)


def test_export_writes_a_hugging_face_folder_that_reloads_with_its_config_class(tmp_path, monkeypatch):
    from conftest import runs_sharing_corpus_caches

    # the run's identity names the pretraining text's split (shingles of every corpus): the suite's cache, built once
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    tokenizer = _tiny_tokenizer()
    base = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=16, n_layer=2, n_head=2))
    model = initial_model(base, "GPT2E learned init", seed=0)
    with torch.no_grad():  # trained-looking entity weights, so that the round trip has something to keep
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    monkeypatch.setattr(study_config, "load_base", lambda config: StudyBase(base, tokenizer, "tiny", 1.0, 0, {"tiny": 1}))
    monkeypatch.setattr(export, "finetuned_model", lambda config, name, seed: (model.eval(), tokenizer))
    monkeypatch.setattr(export, "finetune_run", lambda config, name, seed: {"test_ppl": 1.0})
    path = export.export_model(EntityStudyConfig(seeds=[4]), "GPT2E learned init")
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert GPT2EConfig.from_pretrained(path).entity_init == "learned"
    loaded = GPT2E.from_pretrained(path).eval()
    x, e = torch.randint(0, len(tokenizer), (1, 12)), torch.tensor([[0, 1, 1, 0, 2, 0, 1, 0, 2, 2, 0, 1]])
    assert torch.equal(loaded(x, entity_ids=e).logits, model(x, entity_ids=e).logits)
    record = __import__("json").loads((path / "lmstudy_run.json").read_text())
    assert record["seed"] == 4 and record["metrics"] == {"test_ppl": 1.0}
    assert export.export_model(EntityStudyConfig(seeds=[4]), "GPT2E learned init") == path  # cached


@pytest.mark.slow
def test_pipeline_end_to_end_on_corpus_slices(tmp_path, monkeypatch):
    from conftest import require_corpus

    for corpus in ("gum", "litbank", "lambada"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    # A tiny "pretrained GPT-2" given by path, with its tokenizer: the paper scale's init_from route.
    weights = tmp_path / "tiny-gpt2"
    tokenizer = _tiny_tokenizer()
    tokenizer.save_pretrained(str(weights))
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(str(weights))
    config = EntityStudyConfig(
        init_from=str(weights), train_docs=1, eval_docs=1, seq_len=32, batch_size=2, budgets=[1, 2, 4], lr=1e-3,
        warmup_steps=1, eval_every=2, seeds=[0, 1], ablation_seeds=[0, 1], lambada_examples=5, timing_steps=2,
        similarity_docs=1, tsne_entities=3, ner_train_docs=1, ner_eval_docs=1, ner_hidden=8, ner_epochs=1,
        # each document's first 256 sub-tokens: scoring whole documents 32 tokens at a time was most of this test
        # (75 -> 11 s); notebook 02 at smoke scale reads them whole
        max_doc_tokens=256,
    )
    table2 = runs.perplexity_runs(config)
    assert len(table2) == 4 and table2["test_ppl"].map(math.isfinite).all()
    assert table2["test_ppl_no_entities"].isna().tolist() == [True, False, True, False]  # GPT2E only
    assert ((table2["lambada_acc"] >= 0) & (table2["lambada_acc"] <= 1)).all()
    trend = runs.trend_table(config)
    assert len(trend) == 12 and sorted(set(trend["step"])) == [1, 2, 4] and set(trend["tokens"]) == {64, 128, 256}
    # the budget at the best step reuses the best weights' scores: the kept checkpoint there scores the same
    base = study_config.load_base(config)
    docs = documents.study_documents(config, base.tokenizer)
    best = table2[table2["best_step"].isin(config.budgets)]
    assert len(best) > 0
    for row in best.itertuples():
        budget = trend[(trend["model"] == row.model) & (trend["seed"] == row.seed) & (trend["step"] == row.best_step)]
        assert budget["test_ppl"].item() == row.test_ppl
        checkpoint = initial_model(base.model, row.model, row.seed)
        run = get_run(STUDY, runs.finetune_config(config, row.model, row.seed))
        load_model(checkpoint, str(kept_checkpoint(run, int(row.best_step)) / "model.safetensors"))
        rescored = runs.coref_test_scores(checkpoint, docs["test"], config, base.tokenizer.eos_token_id)
        assert rescored["test_ppl"] == pytest.approx(row.test_ppl, rel=1e-6)
    curves = runs.loss_curves(config)
    assert set(curves["split"]) == {"training", "validation"} and set(curves["model"]) == set(MODELS)
    ablations = runs.ablation_runs(config)
    assert set(ablations["model"]) == {"GPT2E", *ABLATIONS} and len(ablations) == 6
    assert len(ablation_table(ablations)) == 3
    timing = timing_module.step_time_run(config)
    assert set(timing["seconds"]) == set(VARIANTS) and min(timing["seconds"].values()) > 0
    assert timing["flops_overhead_pct"]["GPT2E per-mention"] > timing["flops_overhead_pct"]["GPT2E"] > 0
    table4 = similarity.similarity_table(config)
    assert list(table4["mean"].columns) == list(similarity.SETTINGS)
    assert table4["mean"].loc[("mention similarity", "NN*")].between(-1, 1).all()
    loads, load = [], similarity.finetuned_model
    monkeypatch.setattr(similarity, "finetuned_model", lambda *args: loads.append(args) or load(*args))
    frames = similarity.tsne_frames(config)
    assert loads == []  # t-SNE reads the mention vectors Table 4 computed: no fine-tuned model loaded again
    assert set(frames) == {"GPT2", "GPT2E (with entities)"} and frames["GPT2"]["entity"].nunique() <= 3
    pd.testing.assert_frame_equal(similarity.tsne_frames(config)["GPT2"], frames["GPT2"])  # cached points
    table5 = ner.ner_table(config)
    assert set(table5["model"]) == set(MODELS) and (table5["type"] == "overall").sum() == 4
    similarity_seeds = similarity.similarity_seeds(config)
    assert len(similarity_seeds) == 2 * 3 * 2 * 2  # seeds x settings x measures x groups
    table = claims(table2, step_time_table(timing), similarity_seeds, table5, trend)
    assert len(table) == 8 + 2 * 3 and set(table["verdict"]) <= set(VERDICTS)
    path = export.export_model(config)
    model, _ = runs.finetuned_model(config, "GPT2E", 0)
    x = torch.randint(0, len(tokenizer), (1, 8))
    assert torch.equal(GPT2E.from_pretrained(path).eval()(x).logits, model(x).logits)
    check = export.check_export(config)  # the folder alone reproduces the recorded test perplexity
    assert check["config_class"] == "GPT2EConfig" and check["path"] == str(path)
    assert check["test_ppl_reloaded"] == pytest.approx(check["test_ppl_recorded"], rel=1e-6)
    again = runs.perplexity_runs(config)  # cached: the same numbers, nothing retrained
    pd.testing.assert_frame_equal(again, table2)


def test_the_trends_of_two_bases_side_by_side_in_percent_of_gpt2():
    """Relative gaps: GPT2E (gold) 2% under GPT2 and 1% under its null-entity reading, at every budget and seed;
    one panel per base."""
    import matplotlib.pyplot as plt

    from lmstudy.entity.plots import plot_trends_beside, relative_trend_gaps

    def trend(scale: float) -> pd.DataFrame:
        rows = []
        for step in (10, 20):
            for seed in (0, 1):
                gpt2 = scale * (50 + step + seed)
                rows += [{"model": "GPT2", "seed": seed, "step": step, "tokens": 100 * step, "test_ppl": gpt2,
                          "test_ppl_no_entities": float("nan")},
                         {"model": "GPT2E", "seed": seed, "step": step, "tokens": 100 * step, "test_ppl": 0.98 * gpt2,
                          "test_ppl_no_entities": 0.99 * gpt2}]
        return pd.DataFrame(rows)

    gaps = relative_trend_gaps(trend(7.0))
    assert len(gaps) == 4
    assert gaps["model_gap"].to_numpy() == pytest.approx([-2.0] * 4)
    assert gaps["entity_gap"].to_numpy() == pytest.approx([-1.0] * 4)
    figure = plot_trends_beside({"3M base": trend(7.0), "SmolLM2": trend(0.5)}, title="t")
    assert [axis.get_title() for axis in figure.axes] == ["3M base", "SmolLM2"]
    plt.close(figure)
