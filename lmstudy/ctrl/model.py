"""The CTRL model of the control-code study: config, scale presets, build, train, save, load.

- **From scratch** (smoke and cpu scales): a byte-level BPE trained on the mixture with the codes
  as special tokens (``data.build_tokenizer``) and a small HF ``GPT2LMHeadModel`` built from a
  ``GPT2Config`` (the paper's CTRL is a 48-layer, 1.63B-parameter transformer with a 250k BPE
  vocabulary, trained on 140 GB; ours keeps the recipe, code first then text, at toy size).
- **Fine-tuning** (paper scale): ``init_from`` names a causal-LM checkpoint (a folder, or a hub id
  in the local Hugging Face cache, e.g. ``gpt2``: ``lmstudy.pretrained``); its tokenizer gets the code
  tokens as extra special tokens and the embedding matrix grows to match. Everything else is the same code path.
- Training is the shared loop (``lmstudy.training.train``) on ``data.MixtureTask``, inside the run
  cache (``lmstudy.runs.cached``): the run folder holds the tokenizer (``tokenizer/``, written
  before training so a resumed run encodes identically), the checkpoints, and the final model
  (``model/``).
- The saved model (:func:`save_control_model`) is a plain ``save_pretrained`` folder --
  ``model.safetensors`` + ``config.json`` + the tokenizer files -- that transformers loads with
  ``AutoModelForCausalLM``/``AutoTokenizer``, plus ``control_codes.json`` (the codes and the
  training mixture, the prior of source attribution). ``dtype="float16"``/``"bfloat16"`` halves
  it for a committed demo checkpoint; :func:`load_control_model` always loads float32 (on the GPU if any).
- The weights kept are the best ones (lowest mean held-out loss over the codes).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from lmstudy.ctrl.codes import code_token
from lmstudy.ctrl.data import CodedTexts, MixtureConfig, build_task, build_tokenizer, load_coded_texts
from lmstudy.pretrained import load_pretrained
from lmstudy.runs import Run, cached, get_run
from lmstudy.scales import preset
from lmstudy.tokenization import load_tokenizer
from lmstudy.training import TrainConfig, count_parameters, train_and_restore

STUDY = "04_control_codes"
CODES_FILE = "control_codes.json"
RUN_FILE = "lmstudy_run.json"  # beside an exported model: how it was trained (scale, config, metrics, log)

@dataclass(frozen=True)
class ControlConfig:
    """Everything that identifies a CTRL training run (its run-cache key)."""

    # data (see data.MixtureConfig)
    codes: tuple[str, ...] = ()  # () = every code in codes.CODES
    train_docs: int = 0
    eval_docs: int = 0
    max_doc_chars: int = 0
    mixture: str = "uniform"
    vocab_size: int = 8192
    # model (ignored for the architecture when init_from is set)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    seq_len: int = 128  # context, code token included
    init_from: str = ""  # "" = from scratch; else a checkpoint folder or hub id to fine-tune
    # training (see training.TrainConfig)
    batch_size: int = 16
    max_steps: int = 1000
    eval_every: int = 250
    lr: float = 1e-3
    warmup_steps: int = 0
    weight_decay: float = 0.0
    lr_schedule: str = "cosine"
    mixed_precision: str = "no"
    seed: int = 0

    def mixture_config(self) -> MixtureConfig:
        return MixtureConfig(tuple(self.codes), self.train_docs, self.eval_docs, self.max_doc_chars, self.mixture)

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            max_steps=self.max_steps, lr=self.lr, weight_decay=self.weight_decay, lr_schedule=self.lr_schedule,
            warmup_steps=self.warmup_steps, eval_every=self.eval_every, checkpoint_every=self.eval_every,
            seed=self.seed, log_every=max(1, min(50, self.eval_every)), mixed_precision=self.mixed_precision,
        )

    @classmethod
    def from_dict(cls, values: dict) -> "ControlConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise KeyError(f"unknown ControlConfig field(s) {sorted(unknown)}; fields: {sorted(names)}")
        values = dict(values)
        if "codes" in values:
            values["codes"] = tuple(values["codes"])
        return cls(**values)


def scale_config(scale: str, **overrides) -> ControlConfig:
    """The run config of ``scale`` (presets: ``lmstudy.scales.PRESETS["04_control_codes"]``) plus overrides."""
    return ControlConfig.from_dict({**preset(STUDY, scale), **overrides})


# --------------------------------------------------------------------------------------------
# build


def build_model(config: ControlConfig, tokenizer) -> GPT2LMHeadModel:
    """A fresh GPT-2 of ``config``'s size over ``tokenizer``'s vocabulary."""
    torch.manual_seed(config.seed)
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=len(tokenizer), n_positions=config.seq_len, n_embd=config.n_embd,
        n_layer=config.n_layer, n_head=config.n_head,
        # No pad_token_id: training batches have no padding, and with pad = eos transformers would
        # warn on every batch that contains an eos. generate() callers pass pad_token_id.
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    ))


def pretrained_with_codes(init_from: str, codes: list[str]):
    """(model, tokenizer) of a causal-LM checkpoint (a local folder or a cached hub id:
    :func:`lmstudy.pretrained.load_pretrained`), with the code tokens added as special tokens."""
    model, tokenizer, _ = load_pretrained(init_from)
    tokenizer.add_special_tokens({"additional_special_tokens": [code_token(name) for name in codes]})
    model.resize_token_embeddings(len(tokenizer))
    return model.train(), tokenizer


# --------------------------------------------------------------------------------------------
# save / load


@dataclass
class ControlModel:
    """A loaded control-code model: the model, its tokenizer, its codes and its training mixture."""

    model: torch.nn.Module
    tokenizer: object
    codes: list[str]
    mixture: dict[str, float]  # the training mixture: the "empirical" attribution prior


def save_control_model(model, tokenizer, mixture: dict[str, float], path: str | Path,
                       dtype: str | None = None) -> Path:
    """``save_pretrained`` the model and tokenizer into ``path`` + ``control_codes.json``."""
    path = Path(path)
    if dtype is not None:  # a half-size copy for a committed checkpoint; the caller's model is kept
        half = {"float16": torch.float16, "bfloat16": torch.bfloat16}
        if dtype not in half:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(half)} (or None for float32)")
        import copy

        model = copy.deepcopy(model).to(half[dtype])
    model.save_pretrained(path)  # model.safetensors + config.json (+ generation_config.json)
    tokenizer.save_pretrained(path)
    (path / CODES_FILE).write_text(json.dumps({"codes": list(mixture), "mixture": mixture}, indent=2) + "\n",
                                   encoding="utf-8")
    return path


def load_control_model(path: str | Path, device: str | torch.device | None = None) -> ControlModel:
    """Load a folder written by :func:`save_control_model` (float32, eval mode, local files only) onto ``device``
    (None: the GPU when there is one, else the CPU)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    path = Path(path)
    if not (path / CODES_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a control-code model: {CODES_FILE} is missing "
                                "(train one with lmstudy.ctrl.model.train_control_model)")
    info = json.loads((path / CODES_FILE).read_text(encoding="utf-8"))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    model.to(device).eval()
    return ControlModel(model, load_tokenizer(path), list(info["codes"]), dict(info["mixture"]))


def export_model(ctrl: ControlModel, path: str | Path, scale: str, config: ControlConfig, metrics: dict,
                 log: list[dict] | None = None, dtype: str | None = "float16") -> Path:
    """A self-describing copy of a trained model (the app's demo checkpoint): the model
    (:func:`save_control_model`, float16 by default) plus ``lmstudy_run.json`` with the scale, config,
    metrics and training log, so :func:`read_run_record` can evaluate it later without the run cache."""
    path = save_control_model(ctrl.model, ctrl.tokenizer, ctrl.mixture, path, dtype=dtype)
    record = {"scale": scale, "config": asdict(config), "metrics": metrics, "log": log or []}
    (path / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def read_run_record(path: str | Path) -> tuple[ControlConfig, dict, list[dict]]:
    """``(config, metrics, log)`` of a model written by :func:`export_model` (the log may be empty:
    checkpoints exported before the log was recorded have none)."""
    record_path = Path(path) / RUN_FILE
    if not record_path.is_file():
        raise FileNotFoundError(f"{path} has no {RUN_FILE}: it was not written by export_model, so its "
                                "training config (and held-out documents) are unknown")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    return ControlConfig.from_dict(record["config"]), record["metrics"], record.get("log", [])


# --------------------------------------------------------------------------------------------
# train


def fit(config: ControlConfig, texts: CodedTexts, run: Run) -> dict:
    """Tokeniser, model, training on ``texts`` into ``run``; saves ``run.path/"model"``. Returns metrics."""
    tokenizer_dir = run.path / "tokenizer"
    if config.init_from:
        model, tokenizer = pretrained_with_codes(config.init_from, texts.codes)
    elif (tokenizer_dir / "tokenizer.json").is_file():  # a resumed run: the exact same ids
        tokenizer = load_tokenizer(tokenizer_dir)
        model = build_model(config, tokenizer)
    else:
        tokenizer = build_tokenizer(texts, config.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)
        model = build_model(config, tokenizer)
    task = build_task(texts, tokenizer, config.batch_size, config.seq_len, config.mixture, seed=config.seed)
    metrics = train_and_restore(model, task, config.train_config(), run)
    save_control_model(model, tokenizer, task.weights, run.path / "model")
    return {**metrics, "parameters": count_parameters(model),
            "train_tokens": {name: int(ids.numel()) for name, ids in task.train_streams.items()},
            "mixture": task.weights}


def train_control_model(config: ControlConfig, texts: CodedTexts | None = None) -> Path:
    """Train (or find in the run cache) the model of ``config``; returns its saved folder.

    ``texts``: the documents per code; by default read from the corpora as ``config`` says. Pass
    your own only with a config that identifies them (the run cache keys on the config alone).
    """
    def run_fn(run: Run) -> dict:
        return fit(config, texts if texts is not None else load_coded_texts(config.mixture_config()), run)

    cached(STUDY, asdict(config), run_fn)
    return get_run(STUDY, asdict(config)).path / "model"


__all__ = ["CODES_FILE", "RUN_FILE", "ControlConfig", "ControlModel", "STUDY", "build_model", "export_model",
           "fit", "load_control_model", "pretrained_with_codes", "read_run_record", "save_control_model",
           "scale_config", "train_control_model"]
