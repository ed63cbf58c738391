"""The CTRL model of the control-code study: config, scale presets, build, train, save, load.

- **From a base** (``base_scale``: the shared base of that scale, :func:`lmstudy.base.study_base`;
  or ``init_from``: a causal-LM checkpoint folder or a hub id in the local Hugging Face cache, e.g.
  ``gpt2``, :mod:`lmstudy.pretrained`; ``init_from`` wins when both are set): the base's tokenizer
  gets the code tokens as extra special tokens and its embedding matrix grows to match
  (:func:`with_codes`). Two **arms** (:func:`arm_config`), the same data, steps, batch and schedule:
  ``from_base`` fine-tunes the base's weights (the paper's recipe at GPU scale); ``scratch``
  (``scratch=True``) trains the base's architecture with the same tokenizer from random weights, so
  the two arms' per-token perplexities compare directly and differ by the pretraining alone.
- **Without a base** (``base_scale="" and init_from=""``, the first published demo run): a byte-level
  BPE trained on the mixture with the codes as special tokens (``data.build_tokenizer``) and a small
  HF ``GPT2LMHeadModel`` built from ``n_layer``/``n_head``/``n_embd``/``seq_len`` (the paper's CTRL is
  a 48-layer, 1.63B-parameter transformer with a 250k BPE vocabulary, trained on 140 GB; ours keeps
  the recipe, code first then text, at toy size). With a base those four fields and ``vocab_size``
  are not used for the architecture: the base's are.
- Training is the shared loop (``lmstudy.training.train``) on ``data.MixtureTask``, inside the run
  cache (``lmstudy.runs.cached``, keyed by :func:`run_identity`): the run folder holds the tokenizer
  (``tokenizer/``, written before training so a resumed run encodes identically; without a base), the
  checkpoints, and the final model (``model/``).
- The saved model (:func:`save_control_model`) is a plain ``save_pretrained`` folder --
  ``model.safetensors`` + ``config.json`` + the tokenizer files -- that transformers loads with
  ``AutoModelForCausalLM``/``AutoTokenizer``, plus ``control_codes.json`` (the codes and the
  training mixture, the prior of source attribution). ``dtype="float16"``/``"bfloat16"`` halves
  it for a committed demo checkpoint; :func:`load_control_model` always loads float32 (on the GPU if any).
- The weights kept are the best ones (lowest mean held-out loss over the codes).
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from lmstudy import hf_export
from lmstudy.base import StudyBase, loaded_study_base
from lmstudy.ctrl import smol_ctrl
from lmstudy.ctrl.codes import CODES_FILE, with_codes, write_code_record
from lmstudy.ctrl.data import CodedTexts, MixtureConfig, build_task, build_tokenizer, load_coded_texts
from lmstudy.pretrained import load_pretrained
from lmstudy.runs import Run, cached, get_run, read_log_records
from lmstudy.scales import SCALES, SMOLLM2_CTRL, preset
from lmstudy.tokenization import load_tokenizer
from lmstudy.training import TrainConfig, count_parameters, train_and_restore

STUDY = "04_control_codes"
ARMS = ("from_base", "scratch")  # fine-tuned from the base / the base's architecture and tokenizer, random weights
# Keys of the study's presets that are not part of a run (the notebook's): which arms to train, the scratch arm's
# learning rate (``lr`` is the from_base arm's; see arm_config), and the evaluation's generation length and seeds.
NOTEBOOK_KEYS = ("arms", "scratch_lr", "generation_tokens", "generation_seeds")

@dataclass(frozen=True)
class ControlConfig:
    """Everything that identifies a CTRL training run (its run-cache key)."""

    # data (see data.MixtureConfig)
    codes: tuple[str, ...] = ()  # () = every code in codes.CODES
    train_docs: int = 0
    eval_docs: int = 0
    max_doc_chars: int = 0
    mixture: str = "uniform"
    vocab_size: int = 8192  # of the BPE trained without a base
    # model (the architecture without a base; with one, the base's is used: module docstring)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    seq_len: int = 128  # context, code token included
    init_from: str = ""  # a checkpoint folder or hub id to start from (wins over base_scale)
    base_scale: str = ""  # "" = none; else start from the shared base of this scale (lmstudy.base.study_base)
    scratch: bool = False  # with a base: its architecture and tokenizer, random weights (the "scratch" arm)
    lora_r: int = 0  # 0: every weight trained; > 0 (with init_from): a LoRA of this rank + the code rows (smol_ctrl)
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

    def __post_init__(self) -> None:
        for name in ("init_from", "base_scale"):  # `-p base_scale ''` on the command line reads as YAML null
            if getattr(self, name) is None:
                object.__setattr__(self, name, "")
        if self.base_scale not in ("", *SCALES):
            raise ValueError(f"unknown base_scale {self.base_scale!r}; choose one of {', '.join(SCALES)} "
                             "(or \"\" for no shared base)")
        if self.lora_r < 0 or (self.lora_r and (not self.init_from or self.scratch)):
            raise ValueError(f"lora_r={self.lora_r}: a LoRA delta (lora_r > 0) needs init_from (a pretrained model, "
                             "e.g. smollm2) and the from_base arm; lora_r=0 trains every weight")
        if self.scratch and not self.has_base:
            raise ValueError("scratch=True copies a base's architecture and tokenizer, but no base is set: give "
                             "base_scale or init_from (without a base the model is from scratch already)")

    @property
    def has_base(self) -> bool:
        """Whether the model starts from a base (its weights, or with ``scratch`` its shape and tokenizer)."""
        return bool(self.init_from or self.base_scale)

    @property
    def arm(self) -> str:
        """``from_base`` (fine-tuned from a base) or ``scratch`` (random weights, with or without a base)."""
        return "from_base" if self.has_base and not self.scratch else "scratch"

    def mixture_config(self) -> MixtureConfig:
        """The data part of the config: which codes, how many documents, how mixed."""
        return MixtureConfig(tuple(self.codes), self.train_docs, self.eval_docs, self.max_doc_chars, self.mixture)

    def train_config(self) -> TrainConfig:
        """The training loop's config of this run."""
        return TrainConfig(
            max_steps=self.max_steps, lr=self.lr, weight_decay=self.weight_decay, lr_schedule=self.lr_schedule,
            warmup_steps=self.warmup_steps, eval_every=self.eval_every, checkpoint_every=self.eval_every,
            seed=self.seed, log_every=max(1, min(50, self.eval_every)), mixed_precision=self.mixed_precision,
        )

    @classmethod
    def from_dict(cls, values: dict) -> "ControlConfig":
        """The config of a dict of its fields (a preset, a run record); unknown keys are an error."""
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise KeyError(f"unknown ControlConfig field(s) {sorted(unknown)}; fields: {sorted(names)}")
        values = dict(values)
        if "codes" in values:
            values["codes"] = tuple(values["codes"])
        return cls(**values)


def scale_config(scale: str, **overrides) -> ControlConfig:
    """The run config of ``scale`` (presets: ``lmstudy.scales.PRESETS["04_control_codes"]``) plus overrides,
    without the preset's :data:`NOTEBOOK_KEYS` (:func:`arm_config` makes each arm's run of it)."""
    values = {**preset(STUDY, scale), **overrides}
    return ControlConfig.from_dict({key: value for key, value in values.items() if key not in NOTEBOOK_KEYS})


def smol_configs(scale: str, **overrides) -> list[ControlConfig]:
    """One run config per seed of the SmolLM2 control-code model at ``scale`` (``lmstudy.scales.SMOLLM2_CTRL``
    plus ``overrides``; ``seeds=[...]`` among them picks the seeds)."""
    if scale not in SMOLLM2_CTRL:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SMOLLM2_CTRL)}")
    values = {**SMOLLM2_CTRL[scale], **overrides}
    seeds = values.pop("seeds")
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    return [ControlConfig.from_dict({**values, "seed": int(seed)}) for seed in seeds]


def arm_config(config: ControlConfig, arm: str, scratch_lr: float | None = None) -> ControlConfig:
    """The run of ``arm`` (:data:`ARMS`) of ``config``: the same data, steps, batch and schedule; ``scratch``
    sets ``scratch=True`` (with a base) and the learning rate ``scratch_lr`` (None: ``config.lr``).

    Without a base the model is trained from scratch anyway: ``scratch`` is ``config`` with that learning rate
    (no ``scratch`` flag, so a run made before the arms keeps its run-cache key) and ``from_base`` is an error."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    lr = config.lr if scratch_lr is None else scratch_lr
    if not config.has_base:
        if arm == "from_base":
            raise ValueError("the from_base arm needs a base: set base_scale (e.g. cpu) or init_from, or run the "
                             "scratch arm alone (arms=[scratch])")
        return replace(config, lr=lr)
    return replace(config, scratch=arm == "scratch", lr=lr if arm == "scratch" else config.lr)


def run_identity(config: ControlConfig) -> dict:
    """What names ``config``'s run in the run cache: its fields, where ``base_scale`` stands for the base's
    own run and step (a retrained base is a new run) and ``base_scale``/``scratch`` at their defaults are left
    out (so runs made before they existed keep their keys; ``base_scale`` is also left out under ``init_from``,
    which wins over it)."""
    identity = asdict(config)
    for name in ("scratch", "lora_r"):
        if not identity[name]:
            del identity[name]
    if config.init_from or not config.base_scale:
        del identity["base_scale"]
    else:
        identity["base"] = _shared_base(config.base_scale).identity
    return identity


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
    return with_codes(model, tokenizer, codes)


def _shared_base(scale: str) -> StudyBase:
    # Loaded (at smoke scale: trained first) once per process; callers copy it before changing anything.
    return loaded_study_base(scale)


def base_with_codes(config: ControlConfig, codes: list[str]):
    """``(model, tokenizer)``: a private copy of ``config``'s base (``init_from``, else the shared base of
    ``base_scale``) with the code tokens added; with ``config.scratch`` the model has the base's config but
    fresh random weights (seeded by ``config.seed``)."""
    if not config.has_base:
        raise ValueError("this config has no base (base_scale and init_from are empty)")
    if config.init_from:
        model, tokenizer = pretrained_with_codes(config.init_from, codes)
    else:
        base = _shared_base(config.base_scale)
        model, tokenizer = with_codes(copy.deepcopy(base.model), copy.deepcopy(base.tokenizer), codes)
    context = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)
    if context and config.seq_len > context:
        raise ValueError(f"seq_len={config.seq_len} is longer than the base's context ({context} positions): "
                         f"set seq_len to at most {context}")
    if config.scratch:  # the same architecture (vocabulary with the codes included), initialised afresh
        # (with the base's own seed this may partly be the draw the base started from: untrained weights still)
        torch.manual_seed(config.seed)
        model = AutoModelForCausalLM.from_config(copy.deepcopy(model.config)).train()
    return model, tokenizer


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
    """``save_pretrained`` the model and tokenizer into ``path`` (:func:`lmstudy.hf_export.save_folder`; ``dtype``:
    a half-size copy for a committed checkpoint, the caller's model is kept) + ``control_codes.json``."""
    path = hf_export.save_folder(model, tokenizer, path, dtype)
    write_code_record(path, mixture)
    return path


def load_control_model(path: str | Path, device: str | torch.device | None = None) -> ControlModel:
    """Load a folder written by :func:`save_control_model` (float32, eval mode, local files only) onto ``device``
    (None: the GPU when there is one, else the CPU). A folder written by :func:`lmstudy.ctrl.smol_ctrl.save_delta_model`
    (an adapter and code rows over a fetched base) is loaded onto its base, the adapter merged."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    path = Path(path)
    if not (path / CODES_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a control-code model: {CODES_FILE} is missing "
                                "(train one with lmstudy.ctrl.model.train_control_model)")
    if (path / smol_ctrl.DELTA_RECORD).is_file():  # a LoRA + code rows delta over a fetched base (SmolLM2)
        return ControlModel(*smol_ctrl.load_delta_model(path, device))
    info = json.loads((path / CODES_FILE).read_text(encoding="utf-8"))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    model.to(device).eval()
    return ControlModel(model, load_tokenizer(path), list(info["codes"]), dict(info["mixture"]))


def export_model(ctrl: ControlModel, path: str | Path, scale: str, config: ControlConfig, metrics: dict,
                 log: list[dict] | None = None, dtype: str | None = "float16") -> Path:
    """A self-describing copy of a trained model (the app's demo checkpoint): the model
    (:func:`save_control_model`, float16 by default) plus ``lmstudy_run.json`` with the scale, config,
    metrics and training log (:func:`lmstudy.hf_export.write_run_record`), so :func:`read_run_record` can
    evaluate it later without the run cache."""
    path = save_control_model(ctrl.model, ctrl.tokenizer, ctrl.mixture, path, dtype=dtype)
    hf_export.write_run_record(path, {"scale": scale, "config": asdict(config), "metrics": metrics, "log": log or []})
    return path


def export_delta(config: ControlConfig, path: str | Path, scale: str) -> Path:
    """A self-describing copy of a trained delta run (``config.lora_r > 0``, trained): its adapter folder
    (:func:`lmstudy.ctrl.smol_ctrl.save_delta_model`, a few MB) plus ``lmstudy_run.json``, as :func:`export_model`
    writes for a full model. Replaces ``path``."""
    run = control_run(config)
    source = run.path / "model"
    if not config.lora_r or not (source / smol_ctrl.DELTA_RECORD).is_file():
        raise FileNotFoundError(f"no trained delta model at {source}: train it first (python -m lmstudy ctrl "
                                "train-smol)")
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(source, path)
    hf_export.write_run_record(path, {"scale": scale, "config": asdict(config), "metrics": run.metrics,
                                      "log": read_log_records(run.log_path)})
    return path


def read_run_record(path: str | Path) -> tuple[ControlConfig, dict, list[dict]]:
    """``(config, metrics, log)`` of a model written by :func:`export_model` (the log may be empty:
    checkpoints exported before the log was recorded have none)."""
    record = hf_export.read_run_record(path)
    if record is None:
        raise FileNotFoundError(f"{path} has no {hf_export.RUN_RECORD}: it was not written by export_model, so its "
                                "training config (and held-out documents) are unknown")
    return ControlConfig.from_dict(record["config"]), record["metrics"], record.get("log", [])


# --------------------------------------------------------------------------------------------
# train


def fit(config: ControlConfig, texts: CodedTexts, run: Run) -> dict:
    """Tokeniser, model, training on ``texts`` into ``run``; saves ``run.path/"model"``. Returns metrics.
    ``config.lora_r > 0``: a delta over ``config.init_from`` (:func:`lmstudy.ctrl.smol_ctrl.fit_delta`)."""
    if config.lora_r:
        return smol_ctrl.fit_delta(config, texts, run, smol_ctrl.LoraSettings(r=config.lora_r, alpha=2 * config.lora_r))
    tokenizer_dir = run.path / "tokenizer"
    if config.has_base:
        model, tokenizer = base_with_codes(config, texts.codes)
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

    cached(STUDY, run_identity(config), run_fn)
    return control_run(config).path / "model"


def control_run(config: ControlConfig) -> Run:
    """The run-cache entry of ``config`` (its ``metrics`` and, via ``runs.read_log``, its log)."""
    return get_run(STUDY, run_identity(config))


@dataclass
class TrainedArm:
    """One arm's trained model: its run config, saved model folder, metrics and training log."""

    config: ControlConfig
    model_dir: Path
    metrics: dict
    log: list[dict]


def arm_configs(config: ControlConfig, arms, scratch_lr: float | None = None) -> dict[str, ControlConfig]:
    """``{arm: its run config}`` (:func:`arm_config`) for the names ``arms`` (distinct, from :data:`ARMS`), in
    the order given; every arm is checked before anything trains."""
    arms = list(arms)
    if not arms or len(set(arms)) != len(arms) or set(arms) - set(ARMS):
        raise ValueError(f"arms must be a non-empty list of distinct names from {', '.join(ARMS)}, got {arms}")
    return {arm: arm_config(config, arm, scratch_lr) for arm in arms}


def train_arms(configs: dict[str, ControlConfig], texts: CodedTexts | None = None) -> dict[str, TrainedArm]:
    """Train (or find in the run cache) each arm's run of :func:`arm_configs`, in order, on the same ``texts``."""
    trained = {}
    for arm, config in configs.items():
        model_dir = train_control_model(config, texts)
        run = control_run(config)
        trained[arm] = TrainedArm(config, model_dir, run.metrics, read_log_records(run.log_path))
    return trained


def exported_arm(path: str | Path) -> dict[str, TrainedArm]:
    """A model written by :func:`export_model` as the one arm it was trained as (``{arm: TrainedArm}``)."""
    config, metrics, log = read_run_record(path)
    return {config.arm: TrainedArm(config, Path(path), metrics, log)}


__all__ = ["ARMS", "NOTEBOOK_KEYS", "STUDY", "ControlConfig", "ControlModel", "TrainedArm",
           "arm_config", "arm_configs", "export_delta", "base_with_codes", "build_model", "control_run", "export_model",
           "exported_arm", "fit", "load_control_model", "pretrained_with_codes", "read_run_record", "run_identity", "smol_configs",
           "save_control_model", "scale_config", "train_arms", "train_control_model"]
