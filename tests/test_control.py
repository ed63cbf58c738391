"""The CTRL control-code study: codes and formatting, the mixture task, both repetition penalties,
source attribution, batched multi-code generation, save/load and the CLI."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper

from lmstudy.ctrl.attribution import attribute, attribution_table, posterior
from lmstudy.ctrl.codes import CODES, code_texts, format_document, format_text, get_code, rating_level
from lmstudy.ctrl.data import CodedTexts, MixtureConfig, build_task, build_tokenizer, code_id, load_coded_texts
from lmstudy.ctrl.generation import generate_codes, generate_rows, tokenizer_codes
from lmstudy.ctrl.model import (
    ControlConfig,
    export_model,
    fit,
    load_control_model,
    pretrained_with_codes,
    read_run_record,
    save_control_model,
    scale_config,
)
from lmstudy.ctrl.sampling import CTRLRepetitionPenalty, HFRepetitionPenalty, SamplingConfig, build_processors
from lmstudy.data.documents import Document
from lmstudy.runs import get_run, read_log_records
from tests.conftest import require_corpus

torch.set_num_threads(1)

# --------------------------------------------------------------------------------------------
# penalties


def test_ctrl_penalty_is_the_papers_formula_and_differs_from_hf_where_it_should():
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0, 0.0]])
    seen = torch.tensor([[0, 1, 1]])  # tokens 0 (positive logit) and 1 (negative) were generated
    theta, temperature = 1.2, 0.7
    # The paper's eq.: p_i = exp(x_i / (T * I(i in g))) / sum_j exp(x_j / (T * I(j in g)))
    scale = torch.tensor([theta, theta, 1.0, 1.0, 1.0])
    expected = torch.softmax(logits / (temperature * scale), dim=-1)

    ours = build_processors(SamplingConfig(temperature=temperature, penalty="ctrl", theta=theta))
    assert torch.allclose(torch.softmax(ours(seen, logits.clone()), -1), expected, atol=1e-6)
    # Division commutes with temperature: the order of the two processors does not matter.
    swapped = LogitsProcessorList([TemperatureLogitsWarper(temperature), CTRLRepetitionPenalty(theta)])
    assert torch.allclose(swapped(seen, logits.clone()), ours(seen, logits.clone()), atol=1e-6)

    ctrl = CTRLRepetitionPenalty(theta)(seen, logits.clone())[0]
    hf = HFRepetitionPenalty(theta)(seen, logits.clone())[0]
    assert ctrl[0] == hf[0] == pytest.approx(2.0 / theta)  # positive seen logit: both divide
    assert ctrl[1] == pytest.approx(-1.0 / theta)  # negative seen logit: the paper divides (moves up) ...
    assert hf[1] == pytest.approx(-1.0 * theta)  # ... HF multiplies (moves down)
    assert torch.equal(ctrl[2:], logits[0, 2:]) and torch.equal(hf[2:], logits[0, 2:])  # unseen: untouched
    # The quirk we keep: under the paper's rule a seen token with a negative logit gains probability.
    assert torch.softmax(ctrl, -1)[1] > torch.softmax(logits[0], -1)[1]


def test_ctrl_penalty_exemptions_and_prompt_length():
    logits = torch.tensor([[1.0, 1.0, 1.0]])
    seen = torch.tensor([[0, 1]])
    out = CTRLRepetitionPenalty(2.0, exempt_ids=[1])(seen, logits.clone())
    assert out.tolist() == [[0.5, 1.0, 1.0]]
    out = CTRLRepetitionPenalty(2.0, prompt_length=1)(seen, logits.clone())  # token 0 is the prompt
    assert out.tolist() == [[1.0, 0.5, 1.0]]
    with pytest.raises(ValueError, match="θ must be > 0"):
        CTRLRepetitionPenalty(0.0)
    with pytest.raises(ValueError, match="penalty"):
        SamplingConfig(penalty="paper")


# --------------------------------------------------------------------------------------------
# codes and formatting


def test_codes_and_secondary_codes():
    assert len(CODES) >= 10 and {"Wikipedia", "Books", "Reviews", "News", "IRC", "Questions", "Translation",
                                  "r/worldnews"} <= set(CODES)
    assert [rating_level(r) for r in (1, 2, 3, 4, 7, 8, 9, 10)] == [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 5.0, 5.0]
    review = Document("train/pos/1", "Great film.", "reviews", "9", None, {"rating": 9})
    assert format_document(CODES["Reviews"], review) == "<|Reviews|>Rating: 5.0\nGreat film."
    unrated = Document("unsup/1", "Some film.", "reviews", "0", None, {"rating": 0})
    assert format_text(CODES["Reviews"], unrated) == "Some film."
    thread = Document("x/1", "Why is the sky blue?\nScattering.\nThanks!", "reddit", "worldnews")
    assert format_text(CODES["r/worldnews"], thread) == "Title: Why is the sky blue?\nText: Scattering.\nThanks!"
    article = Document("bbc/1", "Shares rose.", "news", None, "Markets up")
    assert format_text(CODES["News"], article) == "Title: Markets up\nText: Shares rose."
    assert format_text(CODES["Questions"], Document("qc/1", "Who?", "qc")) == "Q: Who?"
    assert get_code("<|Reviews|>") == "Reviews"
    with pytest.raises(ValueError, match="unknown control code 'Recipes'"):
        get_code("Recipes")


def test_code_documents_from_the_corpora():
    for corpus in ("imdb", "nltk_data", "multi30k", "reddit"):
        require_corpus(corpus)
    reviews = code_texts("Reviews", "valid", limit=3)
    assert len(reviews) == 3 and all(text.startswith("Rating: ") for text in reviews)
    questions = code_texts("Questions", "test", limit=2)
    assert len(questions) == 2 and questions[0].startswith("Q: ")
    pairs = code_texts("Translation", "valid", limit=2)
    assert pairs[0].startswith("English: ") and " ; German: " in pairs[0]
    threads = code_texts("r/books", "train", limit=2)
    assert len(threads) == 2 and all(text.startswith("Title: ") for text in threads)
    texts = load_coded_texts(MixtureConfig(codes=("Questions", "Translation"), train_docs=4, eval_docs=2,
                                           max_doc_chars=30))
    assert texts.codes == ["Questions", "Translation"]
    assert [len(texts.train[c]) for c in texts.codes] == [4, 4] and len(texts.valid["Questions"]) == 2
    assert max(len(t) for t in texts.train["Translation"]) <= 30
    # Held-out documents are not training documents.
    assert not set(texts.valid["Questions"]) & set(code_texts("Questions", "train"))


# --------------------------------------------------------------------------------------------
# a tiny model on two synthetic domains


ALPHA = "apple banana cherry grape lemon mango melon peach pear plum".split()
BETA = "engine piston gear valve bolt rotor shaft clutch brake spring".split()


def synthetic_texts(words: list[str], n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    return [" ".join(words[i] for i in torch.randint(len(words), (12,), generator=g).tolist()) + "."
            for _ in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    texts = CodedTexts(
        train={"Alpha": synthetic_texts(ALPHA, 60, 1), "Beta": synthetic_texts(BETA, 60, 2)},
        valid={"Alpha": synthetic_texts(ALPHA, 4, 3), "Beta": synthetic_texts(BETA, 4, 4)},
    )
    config = ControlConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, seq_len=32, batch_size=8,
                           max_steps=60, eval_every=30, lr=5e-3, lr_schedule="constant", seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMSTUDY_RUNS", str(tmp_path_factory.mktemp("runs")))
        run = get_run("test_control", {"synthetic": 1})
        metrics = fit(config, texts, run)
    loaded = load_control_model(run.path / "model")
    return loaded, metrics, texts, run


def test_mixture_task_sequences_start_with_their_code_and_are_balanced():
    texts = CodedTexts(train={"Alpha": synthetic_texts(ALPHA, 30, 1), "Beta": synthetic_texts(BETA, 90, 2)},
                       valid={"Alpha": ["apple."], "Beta": ["gear."]})
    tokenizer = build_tokenizer(texts, 300)
    codes = {code_id(tokenizer, "Alpha"), code_id(tokenizer, "Beta")}
    task = build_task(texts, tokenizer, batch_size=64, seq_len=16, batches_per_epoch=3)
    assert task.weights == {"Alpha": 0.5, "Beta": 0.5}
    batches = list(task.batches(0))
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(batches, task.batches(0)))  # deterministic
    x, y = batches[0]
    assert x.shape == y.shape == (64, 16)
    assert set(x[:, 0].tolist()) == codes  # position 0 is always a code ...
    assert not (set(y.flatten().tolist()) & codes)  # ... and codes are never targets
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    firsts = torch.cat([b[0][:, 0] for b in batches])
    assert 0.35 < (firsts == code_id(tokenizer, "Alpha")).float().mean() < 0.65  # uniform, not 1:3
    proportional = build_task(texts, tokenizer, 8, 16, mixture="proportional")
    sizes = {name: ids.numel() for name, ids in proportional.train_streams.items()}
    assert proportional.weights["Beta"] / proportional.weights["Alpha"] == pytest.approx(sizes["Beta"] / sizes["Alpha"])
    with pytest.raises(ValueError, match="no control code 'Gamma'"):
        code_id(tokenizer, "Gamma")


def test_training_learns_and_saves_a_loadable_model(trained, tmp_path):
    loaded, metrics, texts, run = trained
    assert metrics["steps"] == 60 and metrics["best_val_loss"] < math.log(len(loaded.tokenizer)) - 1.0
    assert {"val_loss_Alpha", "val_loss_Beta"} <= set(metrics)
    assert sorted(loaded.codes) == ["Alpha", "Beta"] and loaded.mixture == {"Alpha": 0.5, "Beta": 0.5}
    assert sorted(tokenizer_codes(loaded.tokenizer)) == ["Alpha", "Beta"]
    model_dir = run.path / "model"
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    plain = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)  # transformers alone
    ids = torch.tensor([[code_id(loaded.tokenizer, "Alpha"), 5, 6]])
    assert torch.allclose(plain(ids).logits.float(), loaded.model(ids).logits, atol=1e-5)
    half = save_control_model(loaded.model, loaded.tokenizer, loaded.mixture, tmp_path / "half", dtype="float16")
    assert (half / "model.safetensors").stat().st_size < 0.6 * (model_dir / "model.safetensors").stat().st_size
    reloaded = load_control_model(half)
    assert reloaded.model.dtype == torch.float32
    assert torch.allclose(reloaded.model(ids).logits, loaded.model(ids).logits, atol=0.05)


def test_exported_model_describes_its_run(trained, tmp_path):
    loaded, metrics, _, run = trained
    config = ControlConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, seq_len=32, seed=0)
    log = read_log_records(run.log_path)
    exported = export_model(loaded, tmp_path / "demo", "smoke", config, metrics, log)
    assert load_control_model(exported).codes == loaded.codes  # still a plain saved model (float16 here)
    back_config, back_metrics, back_log = read_run_record(exported)
    assert back_config == config and back_metrics["steps"] == 60 and back_log == log
    assert [r["kind"] for r in back_log].count("eval") == 2  # eval_every 30 over 60 steps
    with pytest.raises(FileNotFoundError, match="lmstudy_run.json"):
        read_run_record(run.path / "model")  # a run's model folder is not an export


def test_attribution_finds_the_source_of_held_out_text(trained):
    loaded, _, texts, _ = trained
    for code, words, seed in (("Alpha", ALPHA, 10), ("Beta", BETA, 11)):
        text = synthetic_texts(words, 1, seed)[0]  # unseen text of the domain
        table = attribute(loaded.model, loaded.tokenizer, text)
        assert table.loc[0, "code"] == code and table.loc[0, "rank"] == 1
        assert table["probability"].sum() == pytest.approx(1.0)
        assert table.loc[0, "perplexity"] < table.loc[1, "perplexity"]
    only = attribute(loaded.model, loaded.tokenizer, "pear plum.", codes=["Beta"])
    assert len(only) == 1 and only.loc[0, "probability"] == pytest.approx(1.0)
    skewed = attribute(loaded.model, loaded.tokenizer, "pear plum.", prior={"Alpha": 1e-9, "Beta": 1.0})
    assert skewed.loc[0, "code"] == "Beta"  # a prior can overrule the likelihood
    mixture = attribute(loaded.model, loaded.tokenizer, "pear plum.", prior="mixture", mixture=loaded.mixture)
    assert mixture["prior"].tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="unknown control code"):
        attribute(loaded.model, loaded.tokenizer, "pear", codes=["Gamma"])
    held_out = attribution_table(loaded.model, loaded.tokenizer, texts.valid, max_chars=40)
    assert len(held_out) == 8 and held_out["correct"].all() and (held_out["true_rank"] == 1).all()
    with pytest.raises(ValueError, match="empty"):
        attribute(loaded.model, loaded.tokenizer, "  ")


def test_posterior_sums_to_one_and_uses_the_prior():
    p = posterior([-10.0, -12.0, -30.0])
    assert sum(p) == pytest.approx(1.0) and p[0] > p[1] > p[2]
    assert posterior([-123.0]) == [pytest.approx(1.0)]
    assert posterior([-1.0, -1.0], prior=[3.0, 1.0]) == [pytest.approx(0.75), pytest.approx(0.25)]


def test_generation_is_reproducible_and_per_column(trained):
    loaded, _, _, _ = trained
    model, tok = loaded.model, loaded.tokenizer
    sampling = SamplingConfig(temperature=1.0, top_k=20, penalty="ctrl", theta=1.2)
    first = generate_codes(model, tok, "apple", ["Alpha", "Beta"], sampling, max_new_tokens=12, seed=7)
    again = generate_codes(model, tok, "apple", ["Alpha", "Beta"], sampling, max_new_tokens=12, seed=7)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    alone = generate_codes(model, tok, "apple", ["Beta"], sampling, max_new_tokens=12, seed=7)
    assert alone[0].token_ids == first[1].token_ids  # a column does not depend on its neighbours
    other = generate_codes(model, tok, "apple", ["Alpha"], sampling, max_new_tokens=12, seed=8)
    assert other[0].token_ids != first[0].token_ids  # the seed matters (12 sampled tokens)
    assert [g.code for g in first] == ["Alpha", "Beta"] and first[0].text == tok.decode(first[0].token_ids)


def test_greedy_loop_matches_hf_generate(trained):
    loaded, _, _, _ = trained
    model, tok = loaded.model, loaded.tokenizer
    ours = generate_codes(model, tok, "gear", ["Alpha", "Beta"], SamplingConfig(greedy=True), max_new_tokens=10,
                          stop_at_eos=False)
    for result in ours:
        prompt = torch.tensor([[code_id(tok, result.code)] + tok("gear")["input_ids"]])
        hf = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10,
                            min_new_tokens=10, pad_token_id=tok.eos_token_id)
        assert hf[0, prompt.size(1):].tolist() == result.token_ids


def test_left_padded_rows_of_different_lengths_match_rows_alone(trained):
    loaded, _, _, _ = trained
    tok = loaded.tokenizer
    rows = [[code_id(tok, "Alpha")] + tok("apple")["input_ids"],
            [code_id(tok, "Beta")] + tok("engine piston gear valve bolt")["input_ids"]]
    assert len(rows[0]) < len(rows[1])  # the first row gets left padding
    for sampling in (SamplingConfig(greedy=True), SamplingConfig(top_k=20, penalty="ctrl")):
        together = generate_rows(loaded.model, rows, sampling, 10, [3, 3], tok.eos_token_id, stop_at_eos=False)
        alone = [generate_rows(loaded.model, [row], sampling, 10, [3], tok.eos_token_id, stop_at_eos=False)[0]
                 for row in rows]
        assert together == alone


def test_generation_errors(trained):
    loaded, _, _, _ = trained
    with pytest.raises(ValueError, match=r"unknown control code\(s\) 'Reviews'.*knows: Alpha, Beta"):
        generate_codes(loaded.model, loaded.tokenizer, "apple", ["Reviews"])
    with pytest.raises(ValueError, match="prompt is empty"):
        generate_codes(loaded.model, loaded.tokenizer, "   ", ["Alpha"])
    with pytest.raises(ValueError, match="no control codes"):
        generate_codes(loaded.model, loaded.tokenizer, "apple", [])


def test_cli_generate_and_attribute(trained, capsys):
    from lmstudy.ctrl.cli import register

    loaded, _, _, run = trained
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    model_dir = str(run.path / "model")
    args = parser.parse_args(["generate", "--model", model_dir, "--code", "Alpha,Beta", "--prompt", "apple",
                              "--max-new-tokens", "5", "--penalty", "ctrl", "--top-k", "10"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "=== Alpha (seed 0) ===" in out and "=== Beta (seed 0) ===" in out
    args = parser.parse_args(["attribute", "--model", model_dir, "engine piston gear valve."])
    assert args.handler(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["code", "rank", "probability"] and out[1].split()[0] == "Beta"
    args = parser.parse_args(["generate", "--model", model_dir, "--code", "Nope", "--prompt", "x"])
    with pytest.raises(ValueError, match="unknown control code"):
        args.handler(args)


def test_fine_tuning_path_adds_the_codes_to_a_checkpoint(trained, tmp_path):
    loaded, _, _, _ = trained
    base = tmp_path / "base"  # stands in for a real checkpoint (gpt2) that is not available offline
    loaded.model.save_pretrained(base)
    loaded.tokenizer.save_pretrained(base)
    model, tokenizer = pretrained_with_codes(str(base), ["Alpha", "Gamma"])
    assert len(tokenizer) == len(loaded.tokenizer) + 1  # Alpha existed, Gamma is new
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert tokenizer("<|Gamma|>apple", add_special_tokens=False)["input_ids"][0] == code_id(tokenizer, "Gamma")


def test_scale_presets_build_configs():
    smoke = scale_config("smoke")
    assert len(smoke.codes) >= 10 and smoke.max_steps <= 50
    assert scale_config("paper").init_from
    with pytest.raises(KeyError, match="unknown ControlConfig field"):
        scale_config("smoke", layers=3)
    with pytest.raises(ValueError, match="unknown scale"):
        scale_config("huge")
