"""A control-code model as a delta over a pretrained Llama (lmstudy/ctrl/smol_ctrl.py), on a tiny random Llama
in SmolLM2's layout (tied embeddings, grouped-query attention) with a fake fetch record: the adapter starts as the
identity, only it and the code rows learn, it saves small and loads back (through load_control_model) to the same
logits, and a step of the shared training loop lowers the loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from lmstudy.ctrl import smol_ctrl  # noqa: E402
from lmstudy.ctrl.data import CodedTexts, build_task  # noqa: E402
from lmstudy.ctrl.model import ControlConfig, ControlModel, load_control_model  # noqa: E402
from lmstudy.runs import Run  # noqa: E402
from test_smollm2 import tiny_llama_folder  # noqa: E402,F401  (a fixture)

CODES = ["Wikipedia", "Books", "Reviews"]


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
FAKE_FETCH = {"name": "tiny", "wheel_sha256": "a" * 64, "gguf_sha256": "b" * 64, "parameters": 1234}


@pytest.fixture
def base_folder(tiny_llama_folder) -> Path:
    """The tiny Llama folder as if fetched: with a fetch record (the hashes the delta model is bound to)."""
    (tiny_llama_folder / smol_ctrl.FETCH_RECORD).write_text(json.dumps(FAKE_FETCH))
    return tiny_llama_folder


def _texts() -> CodedTexts:
    words = {"Wikipedia": "The city is the capital of the region and lies on the river.",
             "Books": "She walked along the shore and thought of the letter in her pocket.",
             "Reviews": "Rating: 5.0\nA wonderful film with a great cast, I loved every minute."}
    return CodedTexts(train={n: [t] * 6 for n, t in words.items()}, valid={n: [t] for n, t in words.items()})


def _peft(base_folder, seed=0):
    torch.manual_seed(seed)
    model, tokenizer = smol_ctrl.base_with_codes(str(base_folder), CODES)
    return smol_ctrl.with_lora(model, smol_ctrl.code_ids_of(tokenizer, CODES)), tokenizer


def _randomise_adapter(peft_model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_a_fresh_adapter_is_exactly_the_base_on_text_without_codes(base_folder):
    from lmstudy.pretrained import load_pretrained

    base, tokenizer, _ = load_pretrained(str(base_folder))
    peft_model, coded = _peft(base_folder)
    ids = torch.tensor([tokenizer("The cat sat on the mat and looked at the door.")["input_ids"]])
    reference = _logits(base, ids)
    adapted = _logits(peft_model.eval(), ids)
    assert adapted.shape[-1] == len(tokenizer) + len(CODES) == len(coded)
    assert torch.equal(adapted[..., : len(tokenizer)], reference)


def test_only_the_adapter_and_the_code_rows_get_gradients(base_folder):
    peft_model, tokenizer = _peft(base_folder)
    _randomise_adapter(peft_model)  # B != 0, so A gets gradients too
    peft_model.train()
    code = smol_ctrl.code_ids_of(tokenizer, CODES)
    ids = torch.tensor([[code[0], *tokenizer("The cat sat on the mat.")["input_ids"], code[1]]])
    peft_model(ids, labels=ids).loss.backward()
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    with_grad = {name for name, p in peft_model.named_parameters() if p.grad is not None}
    assert with_grad == trainable
    assert all("lora_" in name or "trainable_tokens_delta" in name for name in trainable)
    layers = peft_model.base_model.model.config.num_hidden_layers
    assert sum("lora_A" in name for name in trainable) == layers * len(smol_ctrl.LLAMA_PROJECTIONS)
    deltas = [p for name, p in peft_model.named_parameters() if "trainable_tokens_delta" in name]
    hidden = peft_model.base_model.model.config.hidden_size
    assert len(deltas) == 1 and deltas[0].shape == (len(CODES), hidden)  # tied: one delta, shared with the head
    assert deltas[0].grad.abs().sum(-1).gt(0).tolist() == [True, True, True]  # the codes' outputs are scored too
    embedding = [p for name, p in peft_model.named_parameters() if p.shape == (len(tokenizer), hidden)]
    assert len(embedding) == 1 and not embedding[0].requires_grad  # the tied 8k x 32 matrix stays frozen


def test_save_and_load_round_trip_gives_the_same_logits_and_the_folder_is_small(base_folder, tmp_path):
    peft_model, tokenizer = _peft(base_folder)
    _randomise_adapter(peft_model)
    peft_model.eval()
    code = smol_ctrl.code_ids_of(tokenizer, CODES)
    ids = torch.tensor([[code[2], *tokenizer("Rating: 4.0\nA fine film.")["input_ids"], code[0]]])
    expected = _logits(peft_model, ids)
    mixture = {name: 1 / len(CODES) for name in CODES}
    folder = smol_ctrl.save_delta_model(peft_model, tokenizer, str(base_folder), CODES, mixture,
                                        smol_ctrl.LoraSettings(), tmp_path / "delta")
    record = smol_ctrl.read_delta_record(folder)
    assert {k: record["base"][k] for k in smol_ctrl.HASH_KEYS} == {k: FAKE_FETCH[k] for k in smol_ctrl.HASH_KEYS}
    assert record["added_tokens"] == {f"<|{name}|>": index for name, index in zip(CODES, code)}
    assert not list(folder.glob("*.bin")) and not list(folder.glob("*.pt"))  # safetensors only

    unmerged = smol_ctrl.load_delta_model(folder, device="cpu", merge=False)
    assert torch.equal(_logits(unmerged.model, ids), expected)
    loaded = load_control_model(folder, device="cpu")  # dispatches to load_delta_model, adapter merged
    assert isinstance(loaded, ControlModel)
    assert loaded.codes == CODES and loaded.mixture == mixture
    assert not any("lora_" in name for name, _ in loaded.model.named_parameters())
    assert torch.allclose(_logits(loaded.model, ids), expected, atol=1e-5, rtol=1e-5)
    assert loaded.tokenizer.convert_tokens_to_ids("<|Books|>") == code[1]

    config = peft_model.base_model.model.config
    hidden, kv = config.hidden_size, config.num_key_value_heads * (config.hidden_size // config.num_attention_heads)
    r = smol_ctrl.LoraSettings().r
    per_layer = r * ((hidden + hidden) * 2 + (hidden + kv) * 2 + (hidden + config.intermediate_size) * 3)
    tensor_bytes = 4 * (per_layer * config.num_hidden_layers + len(CODES) * hidden) + 8 * len(CODES)
    assert tensor_bytes < folder_bytes(folder) < tensor_bytes + 32_000  # headers and JSON records
    assert folder_bytes(folder) < 0.2 * sum(p.stat().st_size for p in base_folder.glob("*.safetensors"))


def test_a_changed_base_is_refused(base_folder, tmp_path):
    peft_model, tokenizer = _peft(base_folder)
    folder = smol_ctrl.save_delta_model(peft_model, tokenizer, str(base_folder), CODES, {n: 1 / 3 for n in CODES},
                                        smol_ctrl.LoraSettings(), tmp_path / "delta")
    (base_folder / smol_ctrl.FETCH_RECORD).write_text(json.dumps({**FAKE_FETCH, "gguf_sha256": "c" * 64}))
    with pytest.raises(ValueError, match="gguf_sha256"):
        load_control_model(folder, device="cpu")


def test_a_step_of_the_shared_training_loop_lowers_the_loss_and_saves_a_delta(base_folder, tmp_path):
    texts = _texts()
    config = ControlConfig(init_from=str(base_folder), seq_len=16, batch_size=4, max_steps=1, eval_every=1,
                           lr=1e-2, lr_schedule="constant")
    model, tokenizer = smol_ctrl.base_with_codes(str(base_folder), texts.codes)
    task = build_task(texts, tokenizer, config.batch_size, config.seq_len, seed=config.seed)
    batch = next(iter(task.batches(0)))  # the batch the one step trains on
    with torch.no_grad():
        before = float(task.loss(model.eval(), batch))
    run = Run("04_control_codes_smol", {"test": 1}, "test", tmp_path / "run")
    run.path.mkdir()
    metrics = smol_ctrl.fit_delta(config, texts, run)
    assert 0 < metrics["trainable_parameters"] < 0.2 * sum(p.numel() for p in model.parameters())
    loaded = load_control_model(run.path / "model", device="cpu")
    with torch.no_grad():
        after = float(task.loss(loaded.model, batch))
    assert after < before - 1e-3, (before, after)


def test_add_codes_extends_a_delta_model(base_folder, tmp_path):
    from lmstudy.ctrl.add_codes import AddCodesConfig, add_codes

    peft_model, tokenizer = _peft(base_folder)
    _randomise_adapter(peft_model)
    delta = smol_ctrl.save_delta_model(peft_model, tokenizer, str(base_folder), CODES, {n: 1 / 3 for n in CODES},
                                       smol_ctrl.LoraSettings(), tmp_path / "delta")
    music = tmp_path / "music"
    music.mkdir()
    for k in range(4):
        (music / f"{k}.txt").write_text(f"The band played song number {k} with a loud guitar and drums.\n")
    config = AddCodesConfig(steps=2, batch_size=2, seq_len=16, eval_docs=1, replay_docs=6, held_out=0.25)
    report = add_codes(delta, {"Music": music}, tmp_path / "out", config, old_texts=_texts())
    assert list(report["code"]) == [*CODES, "Music"]
    extended = load_control_model(tmp_path / "out", device="cpu")
    assert extended.codes == [*CODES, "Music"]
    assert extended.tokenizer.convert_tokens_to_ids("<|Music|>") == len(tokenizer)  # old ids kept, one new


def test_an_adapter_checkpoint_holds_the_trainable_tensors_alone_and_loads_back(base_folder, tmp_path):
    from safetensors.torch import load_file

    from lmstudy.checkpoints import load_model_file, save_model_file

    peft_model, tokenizer = _peft(base_folder)
    _randomise_adapter(peft_model)
    save_model_file(peft_model, tmp_path / "model.safetensors")
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert set(saved) == set(smol_ctrl.trainable_parameters(peft_model))  # no frozen base weight in the file
    fresh, _ = _peft(base_folder)
    ids = torch.tensor([[smol_ctrl.code_ids_of(tokenizer, CODES)[0], *tokenizer("The cat sat.")["input_ids"]]])
    assert not torch.equal(_logits(fresh.eval(), ids), _logits(peft_model.eval(), ids))
    load_model_file(fresh, tmp_path / "model.safetensors")
    assert torch.equal(_logits(fresh.eval(), ids), _logits(peft_model.eval(), ids))
    other, _ = smol_ctrl.base_with_codes(str(base_folder), CODES)
    other = smol_ctrl.with_lora(other, smol_ctrl.code_ids_of(tokenizer, CODES), smol_ctrl.LoraSettings(targets=("q_proj",)))
    with pytest.raises(ValueError, match="trainable tensors"):
        load_model_file(other, tmp_path / "model.safetensors")


def test_a_lora_config_needs_a_pretrained_base_and_keys_its_runs_apart():
    from dataclasses import replace

    from lmstudy.ctrl.model import run_identity, smol_configs

    with pytest.raises(ValueError, match="needs init_from"):
        ControlConfig(lora_r=8)
    with pytest.raises(ValueError, match="needs init_from"):
        ControlConfig(init_from="smollm2", lora_r=8, scratch=True)
    full = ControlConfig(init_from="smollm2")
    assert "lora_r" not in run_identity(full)  # runs made before the field keep their keys
    assert run_identity(replace(full, lora_r=8))["lora_r"] == 8
    configs = smol_configs("cpu")
    assert [c.seed for c in configs] == [0, 1, 2] and all(c.lora_r > 0 and c.init_from == "smollm2" for c in configs)
    assert [c.seed for c in smol_configs("smoke", seeds=[3, 4])] == [3, 4]
    with pytest.raises(ValueError, match="unknown scale"):
        smol_configs("huge")
