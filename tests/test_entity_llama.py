"""The entity sub-layer on Llama decoder layers (lmstudy/entity/llama.py), on a tiny random Llama in SmolLM2's layout:
a zero output projection gives the base's logits exactly, the model is strictly causal in both memory modes, the
memory carries from chunk to chunk, only the chosen layers get the sub-layer, and it saves and reloads as a Hugging
Face folder with its config class."""

from __future__ import annotations

import pytest
import torch

from lmstudy.entity.llama import LlamaE, LlamaEConfig, LlamaEntityLayer
from test_smollm2 import tiny_llama, tiny_llama_folder  # noqa: F401  (a fixture)

VOCAB = 97


@pytest.fixture
def base():
    torch.set_num_threads(1)
    return tiny_llama(VOCAB).double()


def _inputs(seed=0, batch=2, length=16):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(VOCAB, (batch, length), generator=generator)
    entities = torch.randint(0, 4, (batch, length), generator=generator)  # 0 = no entity, 1..3 = clusters
    return ids, entities


def _randomise_entity_output(model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.blocks():
            if isinstance(layer, LlamaEntityLayer):
                weight = layer.entity_attn.o_proj.weight
                weight.copy_(torch.randn(weight.shape, generator=generator, dtype=weight.dtype) * 0.1)


def test_a_zero_output_projection_gives_the_base_logits_exactly(base):
    ids, entities = _inputs()
    model = LlamaE.from_llama(base).double().eval()
    assert sum(isinstance(layer, LlamaEntityLayer) for layer in model.blocks()) == base.config.num_hidden_layers
    with torch.no_grad():
        reference = base(ids).logits
        output = model(ids, entity_ids=entities)
    assert torch.equal(output.logits, reference)
    assert output.entity_memory is not None and output.entity_states.shape == (*ids.shape, base.config.hidden_size)
    _randomise_entity_output(model)
    with torch.no_grad():
        assert not torch.allclose(model(ids, entity_ids=entities).logits, reference)


@pytest.mark.parametrize("memory_update", ["chunk", "mention"])
def test_strictly_causal(base, memory_update):
    model = LlamaE.from_llama(base, memory_update=memory_update).double().eval()
    _randomise_entity_output(model)
    ids, entities = _inputs(batch=1)
    cut = 9
    changed_ids, changed_entities = ids.clone(), entities.clone()
    changed_ids[:, cut:] = (changed_ids[:, cut:] + 5) % VOCAB
    changed_entities[:, cut:] = (changed_entities[:, cut:] + 1) % 4
    with torch.no_grad():
        before = model(ids, entity_ids=entities).logits
        after = model(changed_ids, entity_ids=changed_entities).logits
    assert torch.allclose(before[:, :cut], after[:, :cut], atol=1e-12)
    assert not torch.allclose(before[:, cut:], after[:, cut:])


def test_the_memory_carries_across_chunks_and_resets_at_a_new_document(base):
    model = LlamaE.from_llama(base).double().eval()
    _randomise_entity_output(model)
    ids, entities = _inputs()
    with torch.no_grad():
        first = model(ids, entity_ids=entities)
        carried = model(ids, entity_ids=entities, entity_memory=first.entity_memory).logits
        fresh = model(ids, entity_ids=entities).logits
        reset = model(ids, entity_ids=entities, entity_memory=first.entity_memory,
                      new_document=torch.tensor([True, True])).logits
    assert first.entity_memory.written[:, 1:].any() and not first.entity_memory.written[:, 0].any()
    assert not torch.allclose(carried, fresh) and torch.allclose(reset, fresh)


def test_only_the_chosen_layers_and_a_folder_round_trip(base, tmp_path):
    model = LlamaE.from_llama(base, entity_layers=[1], entity_init="learned").double().eval()
    assert [isinstance(layer, LlamaEntityLayer) for layer in model.blocks()] == [False, True]
    assert model.config.n_entity_layers == 1 and hasattr(model, "initial_entity")
    _randomise_entity_output(model)
    model.save_pretrained(tmp_path / "llamae")
    loaded = LlamaE.from_pretrained(tmp_path / "llamae", dtype=torch.float64).eval()
    assert isinstance(loaded.config, LlamaEConfig) and loaded.config.entity_layers == [1]
    ids, entities = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded(ids, entity_ids=entities).logits, model(ids, entity_ids=entities).logits)
    plain = LlamaE.from_llama(base, entity_layers=[]).double().eval()
    assert not plain.has_entity_layers
    with torch.no_grad():
        assert torch.equal(plain(ids, entity_ids=entities).logits, base(ids).logits)
    with pytest.raises(ValueError, match="entity_init"):
        LlamaEConfig(entity_init="zeros")


def test_the_entity_study_data_trains_a_llamae(base):
    """The study's pipeline (coreference documents -> entity ids per sub-token -> row-continuing batches, the
    memory carried) drives LlamaE as it drives GPT2E: with the tiny Llama's tokenizer, on real GUM documents."""
    from conftest import require_corpus
    from transformers import AutoTokenizer

    from lmstudy.entity.data import batch_loss, load_entity_documents, stream_batches
    from test_smollm2 import BASE_TOKENIZER

    require_corpus("gum")
    tokenizer = AutoTokenizer.from_pretrained(BASE_TOKENIZER)
    docs = load_entity_documents("gum", "train", tokenizer=tokenizer, limit=2)
    assert any(any(e != 0 for e in doc.entity_ids) for doc in docs)
    model = LlamaE.from_llama(tiny_llama(len(tokenizer)).double())
    _randomise_entity_output(model)
    memory, losses = None, []
    for step, batch in zip(range(3), stream_batches(docs, 2, 32, tokenizer.eos_token_id)):
        loss, memory = batch_loss(model, batch, memory)
        loss.backward()
        losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))) and memory.written.any()
    assert all(p.grad is not None for p in model.blocks()[0].entity_attn.parameters())


@pytest.mark.slow  # the whole study route: ~13 s
def test_the_entity_study_runs_on_a_llama_with_its_top_layers_trained(tiny_llama_folder, tmp_path, monkeypatch):
    """The study's init_from route with a Llama (SmolLM2's, issue 50): LlamaE and its plain twin, entity sub-layers in
    the top block only, the top block alone trained in both arms; the run's FLOPs by hand; the export reloads."""
    import math

    from conftest import require_corpus
    from transformers import LlamaForCausalLM

    from lmstudy.entity import export, runs
    from lmstudy.entity.config import EntityStudyConfig, load_base
    from lmstudy.entity.model import training_flops_per_token
    from lmstudy.llama_size import llama_non_embedding_parameters

    for corpus in ("gum", "litbank", "lambada"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    config = EntityStudyConfig(init_from=str(tiny_llama_folder), train_docs=1, eval_docs=1, seq_len=32, batch_size=2,
                               budgets=[1, 2], warmup_steps=1, eval_every=2, seeds=[0], lambada_examples=3,
                               max_doc_tokens=128, entity_top_layers=1, trained_top_layers=1)
    base = load_base(config).model
    assert isinstance(base, LlamaForCausalLM) and base.config.num_hidden_layers == 2
    models = {name: runs.initial_model(base, name, 0, config) for name in ("GPT2", "GPT2E")}
    assert isinstance(models["GPT2E"], LlamaE) and models["GPT2E"].config.entity_layers == [1]
    trained = {name: {n for n, p in model.named_parameters() if p.requires_grad} for name, model in models.items()}
    assert trained["GPT2"] and all(n.startswith("model.layers.1.") for n in trained["GPT2E"])
    extra = trained["GPT2E"] - trained["GPT2"]  # the same block in both arms, plus the entity sub-layer
    assert trained["GPT2"] < trained["GPT2E"] and extra and all(".entity_attn." in n for n in extra)
    table = runs.perplexity_runs(config)
    assert table["test_ppl"].map(math.isfinite).all() and table["test_ppl_no_entities"].isna().tolist() == [True, False]
    d, n, T = base.config.hidden_size, base.config.num_hidden_layers, config.seq_len
    plain = 6 * (llama_non_embedding_parameters(base.config) + d * base.config.vocab_size) + 12 * n * d * T
    assert training_flops_per_token(base.config, T) == plain
    assert training_flops_per_token(models["GPT2E"].config, T) == plain + 6 * (4 * d * d + d) + 12 * d * T
    check = export.check_export(config)
    assert check["config_class"] == "LlamaEConfig"
    assert check["test_ppl_reloaded"] == pytest.approx(check["test_ppl_recorded"], rel=1e-6)


def test_the_figures_of_a_fetched_model_carry_its_name():
    from lmstudy.entity.config import EntityStudyConfig, figure_prefix

    assert figure_prefix(EntityStudyConfig(init_from="smollm2")) == "02_entity_smollm2_"
    assert figure_prefix(EntityStudyConfig()) == figure_prefix(EntityStudyConfig(init_from="gpt2")) == "02_entity_"
