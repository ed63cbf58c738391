"""The shared base models: one byte-level BPE and one small GPT-2 pretrained once on all our
pretraining text, shipped under ``models/`` and reused by every transformer study.

Pipeline (each step cached in the run folder of its config, so a rerun or a resume after a kill
picks up where the last one stopped):

1. **Data** (``prepare_data``, run study ``base_data``). The documents are those of
   :func:`training_documents`: the pretraining parts of every shuffled domain (Wikipedia, books,
   Reddit, IMDB, news, IRC), raw text, minus every document that near-duplicates an evaluation text
   (the split-hygiene rule of ``lmstudy.data``). One pass over them writes the texts to a temporary
   JSONL file and keeps a deterministic ~``tokenizer_sample`` share of the documents (chosen by a
   hash of the document key) for the BPE; the BPE is trained on that sample
   (:func:`lmstudy.tokenization.train_bpe`), then every document is encoded, followed by the
   end-of-text token, into ``train.bin`` (uint16: the vocabulary is < 65,536). The validation stream
   is each domain's *valid* part, the first documents up to ``valid_tokens_per_domain`` tokens per
   domain; it only steers the training log and ``best/`` (the evaluation protocol reads the test
   parts). The run's metrics record tokens, documents and bytes per domain.
2. **Model** (``train_base``, run study ``base``). A ``GPT2LMHeadModel`` with tied embeddings and no
   dropout (one pass over fresh text: nothing to regularise), trained by the shared loop
   (``lmstudy.training.train``) on nanoGPT-style random windows of ``seq_len`` tokens of the
   training stream (uniform over tokens, so each domain weighs as much as its text), AdamW with
   betas (0.9, 0.95), weight decay 0.1, linear warm-up and cosine decay to a tenth. The token budget
   is ``train_tokens``; the checkpoints at ``checkpoint_fractions`` of it (10%, 30%, 100%) are kept for
   the trend studies. A model's compute is counted as ``flops_per_token * tokens`` (PaLM's
   6N + 12·L·d·T per token, with N the non-embedding parameters plus the output projection, which
   is real compute even when tied).
3. **Sweep** (``python -m lmstudy base sweep``, :mod:`lmstudy.base_sweep`): the one-off choice of the model's
   size, by training a few widths/depths with the same compute.
4. **Export** (``export_base``, through :mod:`lmstudy.hf_export`): each kept checkpoint becomes a Hugging Face
   folder (safetensors in float16 to keep the three in git small, config, tokenizer, ``lmstudy_run.json`` with the
   run record, and a model card ``README.md`` with the data, tokens, time and the protocol's numbers).
   ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)`` load it.

Command line: ``python -m lmstudy base train|sweep|export --scale smoke|cpu|paper`` (``--help``).
"""

from __future__ import annotations

import functools
import json
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.checkpoints import kept_checkpoint
from lmstudy.data.base_manifest import BASE_DOMAINS
from lmstudy.hf_export import export_folder, read_run_record, write_model_card
from lmstudy.lm_batches import LMTask
from lmstudy.paths import models_dir
from lmstudy.runs import Run, cached, get_run, main_process_first, read_log_records
from lmstudy.tokenization import load_tokenizer, train_bpe
from lmstudy.training import TrainConfig, count_parameters, train

DATA_STUDY = "base_data"
STUDY = "base"
DOMAINS = BASE_DOMAINS  # every domain with a pretraining part


@dataclass(frozen=True)
class BaseDataConfig:
    """What the base trains on: the documents, the tokenizer and the validation slice."""

    vocab_size: int = 8192
    tokenizer_sample: float = 0.1  # share of the documents the BPE is trained on
    # The first documents of each domain up to this share of its pretraining words (1 = all; the
    # sweep and smoke runs take less, with every domain in its full-data proportion).
    data_fraction: float = 1.0
    valid_tokens_per_domain: int = 20_000


@dataclass(frozen=True)
class BaseModelConfig:
    """The base GPT-2's size: layers, heads, width and context length (``seq_len`` tokens)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    seq_len: int = 256


@dataclass(frozen=True)
class BaseConfig:
    """One base run: data, model size and recipe. ``train_tokens`` is the training budget."""

    data: BaseDataConfig = field(default_factory=BaseDataConfig)
    model: BaseModelConfig = field(default_factory=BaseModelConfig)
    train_tokens: int = 20_000_000
    batch_size: int = 16
    lr: float = 2e-3
    warmup_fraction: float = 0.02
    weight_decay: float = 0.1
    eval_every_fraction: float = 0.05
    checkpoint_fractions: tuple[float, ...] = (0.1, 0.3, 1.0)
    seed: int = 0
    compile: bool = False  # torch.compile the model (in place: checkpoints keep plain GPT-2 names)
    # "bf16" on a GPU (the paper preset): autocast in the training step; weights, optimizer and evaluation stay fp32
    mixed_precision: str = "no"
    # validation on the first N tokens of the validation stream; 0: all of it (every preset; a dry run cuts it)
    max_eval_tokens: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.seq_len

    @property
    def max_steps(self) -> int:
        return max(1, round(self.train_tokens / self.tokens_per_step))

    def kept_steps(self) -> dict[float, int]:
        """Checkpoint fraction -> step (at least step 1; the last is always ``max_steps``)."""
        return {f: max(1, round(f * self.max_steps)) for f in self.checkpoint_fractions}

    def lm_task(self, train_ids: torch.Tensor, valid_ids: torch.Tensor) -> LMTask:
        """The base's task: random windows of ``train_ids`` (seeded), validation on ``valid_ids`` (its first
        ``max_eval_tokens`` when set). The scratch arm of study 03 trains on the same one, batch for batch."""
        return LMTask(train_ids, valid_ids, batch_size=self.batch_size, seq_len=self.model.seq_len,
                      eval_batch_size=2 * self.batch_size, seed=self.seed, max_eval_tokens=self.max_eval_tokens or None)

    def train_config(self) -> TrainConfig:
        steps = self.max_steps
        every = max(1, round(self.eval_every_fraction * steps))
        return TrainConfig(
            max_steps=steps, lr=self.lr, weight_decay=self.weight_decay, betas=(0.9, 0.95),
            lr_schedule="cosine", warmup_steps=round(self.warmup_fraction * steps), eval_every=every,
            checkpoint_every=every, log_every=max(1, min(50, every // 4)), seed=self.seed,
            keep_checkpoints=tuple(self.kept_steps().values()), mixed_precision=self.mixed_precision,
        )

    @classmethod
    def from_dict(cls, values: dict) -> BaseConfig:
        values = dict(values)
        data = BaseDataConfig(**values.pop("data", {}))
        model = BaseModelConfig(**values.pop("model", {}))
        if "checkpoint_fractions" in values:
            values["checkpoint_fractions"] = tuple(values["checkpoint_fractions"])
        return cls(data=data, model=model, **values)


# ---------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------


def training_documents(data_fraction: float = 1.0) -> Iterator[tuple[str, str, str]]:
    """(domain, document key, raw text) of the documents the base may train on, in a fixed order:
    the near-duplicate-filtered pretraining documents of ``lmstudy.data.parts.base_training_documents``,
    of each domain its first documents up to ``data_fraction`` of its pretraining words."""
    from lmstudy.data.parts import base_training_documents
    from lmstudy.data.splits import load_split

    for domain in DOMAINS:
        budget = data_fraction * load_split(domain).tokens["pretrain"]
        words = 0
        for _, key, document in base_training_documents([domain]):
            if data_fraction < 1 and words >= budget:
                break  # closing the generator stops reading the corpus
            words += len(document.text.split())
            yield domain, key, document.text


def _in_sample(key: str, share: float) -> bool:
    # crc32 of the key: the same documents at every rebuild, whatever order the readers use.
    return zlib.crc32(key.encode("utf-8")) % 10_000 < share * 10_000


def _encode_to_file(tokenizer, texts: Iterator[str], path: Path, desc: str, batch: int = 256) -> int:
    """Encode ``texts`` (each followed by eos) into ``path`` as uint16; returns the token count."""
    eos = tokenizer.eos_token_id
    count = 0
    with open(path, "wb") as out:
        chunk: list[str] = []

        def flush() -> int:
            ids = tokenizer(chunk, add_special_tokens=False)["input_ids"]
            flat = np.fromiter((i for doc in ids for i in (*doc, eos)), dtype=np.uint16)
            out.write(flat.tobytes())
            chunk.clear()
            return flat.size

        for text in tqdm(texts, desc=desc, unit=" docs"):
            chunk.append(text)
            if len(chunk) == batch:
                count += flush()
        if chunk:
            count += flush()
    return count


def _validation_ids(domain: str, token_budget: int, tokenizer) -> list[int]:
    """The first documents of ``domain``'s valid part, each followed by eos, up to ``token_budget`` ids."""
    from lmstudy.data.parts import split_documents

    ids: list[int] = []
    for document in split_documents(domain, "valid"):
        ids += [*tokenizer(document.text)["input_ids"], tokenizer.eos_token_id]
        if len(ids) >= token_budget:
            break
    return ids


def prepare_data(config: BaseDataConfig) -> Run:
    """Step 1 of the module docstring (cached): the run folder holding ``tokenizer/``, ``train.bin``,
    ``valid.bin``; its metrics are the token and document counts."""
    if not 256 < config.vocab_size <= 65_536:
        raise ValueError(f"vocab_size must be in (256, 65536] (uint16 streams), got {config.vocab_size}")
    if not 0 < config.data_fraction <= 1:
        raise ValueError(f"data_fraction must be in (0, 1], got {config.data_fraction}")
    if not 0 < config.tokenizer_sample <= 1:
        raise ValueError(f"tokenizer_sample must be in (0, 1], got {config.tokenizer_sample}")

    with main_process_first():  # under `accelerate launch` one process writes the streams, the others read them
        run = get_run(DATA_STUDY, asdict(config))
        cached(DATA_STUDY, asdict(config), lambda run: _write_data(run, config))
        if not (run.path / "train.bin").is_file() or not (run.path / "valid.bin").is_file():
            # A data run restored from an archive carries its tokenizer and metrics, not the streams
            # (hundreds of MB): encode them again with that tokenizer, and check they came out the same.
            info = _write_data(run, config, load_tokenizer(run.path / "tokenizer"))
            saved = run.metrics
            if (info["train_tokens"], info["valid_tokens"]) != (saved["train_tokens"], saved["valid_tokens"]):
                raise RuntimeError(f"re-encoding {run.path} gave other token counts than its metrics.json: "
                                   "the corpora or splits changed; move the run folder away to rebuild it")
    return run


def _write_data(run: Run, config: BaseDataConfig, tokenizer=None) -> dict:
    """Write the streams of ``run`` (training the BPE first unless ``tokenizer`` is given); returns
    the counts (the data run's metrics)."""
    per_domain: dict[str, dict] = {d: {"documents": 0, "bytes": 0} for d in DOMAINS}
    sample: list[str] = []
    with tempfile.TemporaryDirectory(dir=run.path) as tmp:
        texts_path = Path(tmp) / "texts.jsonl"
        with open(texts_path, "w", encoding="utf-8") as handle:
            for domain, key, text in training_documents(config.data_fraction):
                handle.write(json.dumps([domain, text]) + "\n")
                per_domain[domain]["documents"] += 1
                per_domain[domain]["bytes"] += len(text.encode("utf-8"))
                if tokenizer is None and _in_sample(key, config.tokenizer_sample):
                    sample.append(text)

        def texts() -> Iterator[str]:
            with open(texts_path, encoding="utf-8") as handle:
                for line in handle:
                    yield json.loads(line)[1]

        if tokenizer is None:
            tokenizer = train_bpe(sample or list(texts()), config.vocab_size)  # tiny smoke runs: all text
            tokenizer.save_pretrained(str(run.path / "tokenizer"))
            del sample
        train_tokens = _encode_to_file(tokenizer, texts(), run.path / "train.bin", "encoding base text")
    valid_tokens = {}
    with open(run.path / "valid.bin", "wb") as out:
        for domain in DOMAINS:
            ids = _validation_ids(domain, config.valid_tokens_per_domain, tokenizer)
            out.write(np.asarray(ids, dtype=np.uint16).tobytes())
            valid_tokens[domain] = len(ids)
    return {"train_tokens": train_tokens, "valid_tokens": valid_tokens, "documents": per_domain,
            "vocab_size": len(tokenizer)}


def finished_data_run(config: BaseDataConfig) -> Run:
    """The data run of ``config`` for its tokenizer and counts, which need no streams (an archived data
    run has none): an error if it was never built."""
    run = get_run(DATA_STUDY, asdict(config))
    if not run.done:
        raise FileNotFoundError(f"the base data {run.path} was never built: python -m lmstudy base train")
    return run


def load_stream(path: Path) -> torch.Tensor:
    """A uint16 token file as an int64 tensor (LMTask's targets must be int64)."""
    return torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))


# ---------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------


def gpt2_config(model: BaseModelConfig, tokenizer) -> GPT2Config:
    """The ``GPT2Config`` of ``model`` over ``tokenizer``'s vocabulary: no dropout, tied embeddings, eos as bos."""
    eos = tokenizer.eos_token_id
    return GPT2Config(
        vocab_size=len(tokenizer), n_positions=model.seq_len, n_embd=model.n_embd, n_layer=model.n_layer,
        n_head=model.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=True,
    )


def non_embedding_parameters(model: BaseModelConfig) -> int:
    """Parameters of the transformer blocks and the final layer norm (no token/position embeddings)."""
    d = model.n_embd
    block = 12 * d * d + 13 * d  # attention 4d^2+4d, MLP 8d^2+5d, two layer norms 4d
    return model.n_layer * block + 2 * d


def flops_per_token(model: BaseModelConfig, vocab_size: int) -> float:
    """Training FLOPs per token: 6 (N + d*V) + 12 L d T (PaLM appendix B; the tied output projection
    is a real (d, V) matmul even though its weights are the embedding's)."""
    n = non_embedding_parameters(model) + model.n_embd * vocab_size
    return 6 * n + 12 * model.n_layer * model.n_embd * model.seq_len


def build_model(config: BaseConfig, tokenizer) -> GPT2LMHeadModel:
    """A freshly initialised base GPT-2 of ``config.model``'s size (seeded by ``config.seed``)."""
    torch.manual_seed(config.seed)
    return GPT2LMHeadModel(gpt2_config(config.model, tokenizer))


def run_config(config: BaseConfig) -> dict:
    """The run's identity: the config without ``compile``, which changes how fast, not what is trained, and
    without ``mixed_precision`` and ``max_eval_tokens`` at their defaults (the runs trained before they existed keep
    their identity)."""
    values = asdict(config)
    del values["compile"]
    for key, default in (("mixed_precision", "no"), ("max_eval_tokens", 0)):
        if values[key] == default:
            del values[key]
    return values


def base_run(config: BaseConfig) -> Run:
    """The ``base`` study's run of ``config`` (its folder in the run cache)."""
    return get_run(STUDY, run_config(config))


def train_base(config: BaseConfig) -> dict:
    """Step 2 (cached, resumable): train the base; returns its metrics (val loss, tokens, FLOPs, time).
    A finished run needs no data: its metrics come back without the streams being rebuilt."""

    def fit(run: Run) -> dict:
        data_run = prepare_data(config.data)
        tokenizer = load_tokenizer(data_run.path / "tokenizer")
        train_ids = load_stream(data_run.path / "train.bin")
        valid_ids = load_stream(data_run.path / "valid.bin")
        model = build_model(config, tokenizer)
        if config.compile:
            model.compile()  # ~10-40% more tokens/s on the CPU (figures/base_throughput.csv)
        metrics = train(model, config.lm_task(train_ids, valid_ids), config.train_config(), run)
        flops = flops_per_token(config.model, len(tokenizer))
        return {
            # Time from the log: a run resumed in another session counts its earlier sessions too.
            **metrics, "train_wall_s": _train_seconds_at(read_log_records(run.log_path), metrics["steps"]),
            "torch_threads": torch.get_num_threads(),
            "parameters": count_parameters(model),
            "non_embedding_parameters": non_embedding_parameters(config.model),
            "flops_per_token": flops, "tokens": metrics["steps"] * config.tokens_per_step,
            "train_flops": flops * metrics["steps"] * config.tokens_per_step,
            "data_tokens": int(train_ids.numel()), "vocab_size": len(tokenizer),
        }

    return cached(STUDY, run_config(config), fit)


def validation_curve(config: BaseConfig) -> list[dict]:
    """The run's evaluations: step, tokens, FLOPs, val_loss (for the loss curve and the sweep)."""
    run = base_run(config)
    vocab = finished_data_run(config.data).metrics["vocab_size"]
    flops = flops_per_token(config.model, vocab)
    rows = []
    for record in read_log_records(run.log_path):
        if record.get("kind") == "eval":
            tokens = record["step"] * config.tokens_per_step
            rows.append({"step": record["step"], "tokens": tokens, "flops": tokens * flops,
                         "val_loss": record["val_loss"]})
    return rows


# ---------------------------------------------------------------------------------------------------
# Presets (the sweep and the choice of size: lmstudy.base_sweep)
# ---------------------------------------------------------------------------------------------------


def model_config(size) -> BaseModelConfig:
    """``[n_layer, n_head, n_embd]`` (a sweep entry) or a dict -> BaseModelConfig."""
    if isinstance(size, BaseModelConfig):
        return size
    if isinstance(size, dict):
        return BaseModelConfig(**size)
    n_layer, n_head, n_embd = size
    return BaseModelConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd)


def final_config(scale: str, model: BaseModelConfig | None = None, **overrides) -> BaseConfig:
    """The final run of ``scale``: the preset's model (or ``model``), trained for the preset's compute.

    ``overrides`` change preset keys; ``data`` and ``model`` (dicts) are merged key by key into the preset's;
    ``eval_every_fraction`` (how often validation runs) and ``max_eval_tokens`` (on how much), which no preset sets,
    are passed on to the config."""
    from lmstudy.scales import preset

    if isinstance(model, dict):  # ``model=`` given as a preset-style override, not a BaseModelConfig
        overrides["model"], model = model, None
    recipe = {key: overrides.pop(key) for key in ("eval_every_fraction", "max_eval_tokens") if key in overrides}
    params = preset(STUDY, scale)
    unknown = set(overrides) - set(params)
    if unknown:
        raise KeyError(f"unknown base preset key(s) {sorted(unknown)}; keys: {', '.join(sorted(params))}")
    for key, value in overrides.items():
        params[key] = {**params[key], **value} if key in ("data", "model") else value
    data = BaseDataConfig(**params["data"])
    model = model or model_config(params["model"])
    tokens = params["compute"] / flops_per_token(model, data.vocab_size)
    return BaseConfig(data=data, model=model, train_tokens=int(tokens), batch_size=params["batch_size"],
                      lr=params["lr"], compile=params["compile"], mixed_precision=params["mixed_precision"], **recipe)


def size_label(model: BaseModelConfig) -> str:
    """A model size as ``LAYERSxWIDTH``, e.g. ``4x256``."""
    return f"{model.n_layer}x{model.n_embd}"



# ---------------------------------------------------------------------------------------------------
# Export: Hugging Face folders with a model card
# ---------------------------------------------------------------------------------------------------

def checkpoint_name(fraction: float) -> str:
    """Folder name of a kept checkpoint: ``base`` for the full run, ``base-10pct`` for 10% of it."""
    return "base" if fraction >= 1 else f"base-{round(100 * fraction):02d}pct"


def load_checkpoint_model(config: BaseConfig, fraction: float) -> tuple[GPT2LMHeadModel, object]:
    """The base model at the kept checkpoint ``fraction`` of ``config``'s run (float32) and its tokenizer."""
    from safetensors.torch import load_model

    tokenizer = load_tokenizer(finished_data_run(config.data).path / "tokenizer")
    step = config.kept_steps()[fraction]
    model = build_model(config, tokenizer)
    load_model(model, str(kept_checkpoint(base_run(config), step) / "model.safetensors"))
    return model.eval(), tokenizer


def model_card(record: dict) -> str:
    """The folder's README.md: what the model is, its data, compute and the evaluation protocol's numbers
    (all from the folder's run record)."""
    m, data = record["config"]["model"], record["data"]
    from lmstudy.evaluation import protocol_markdown

    per_domain = "\n".join(
        f"| {domain} | {info['documents']:,} | {info['bytes'] / 1e6:,.1f} |" for domain, info in data["documents"].items()
    )
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags: [gpt2, lmstudy]
---

# {record['name']}: the lmstudy shared base at {record['fraction']:.0%} of its training tokens

A GPT-2 ({m['n_layer']} layers, {m['n_head']} heads, width {m['n_embd']}, context {m['seq_len']}; {record['parameters']:,}
parameters with tied embeddings) with a {data['vocab_size']:,}-id byte-level BPE, trained from scratch by
`python -m lmstudy base train --scale {record['scale']}` (`lmstudy/base.py`) and exported by
`python -m lmstudy base export --scale {record['scale']}`. Weights are float16 safetensors; load them as float32 on a CPU:

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{record['path']}", dtype="float32")
tokenizer = AutoTokenizer.from_pretrained("{record['path']}")
```

## Training
- Step {record['step']:,} of the run's {record['max_steps']:,}: {record['tokens']:,} tokens ({record['tokens'] / 1e6:.1f}M),
  {record['train_flops']:.3g} training FLOPs; batches of {record['config']['batch_size']} random windows of {m['seq_len']}
  tokens, AdamW (0.9, 0.95), weight decay {record['config']['weight_decay']}, peak learning rate {record['config']['lr']},
  linear warm-up then cosine decay to a tenth over the whole run (so this checkpoint's learning rate had not decayed
  fully unless it is the last).
- Time: about {record['train_s'] / 3600:.2f} h of training to this step on the 2-core CPU (2 torch threads, torch.compile).
- Data: the pretraining parts of our document-level splits (raw text, every document followed by `<|endoftext|>`),
  minus every document that near-duplicates an evaluation text (WikiText-2, LAMBADA, GUM/LitBank dev/test, every
  domain's valid/test): {data['train_tokens']:,} tokens; the windows are drawn uniformly from all of it.

| domain | documents | MB of text |
|---|---:|---:|
{per_domain}

## Evaluation (lmstudy's protocol, `python -m lmstudy eval {record['path']}`)

{protocol_markdown(record['protocol'])}
"""


def _train_seconds_at(log: list[dict], step: int) -> float:
    """Training seconds up to ``step``, from the log's ``train_s`` (scaled from the last record before it)."""
    before = [r for r in log if r.get("kind") == "train" and "train_s" in r and r["step"] <= step]
    if not before:
        return float("nan")
    return before[-1]["train_s"] * step / before[-1]["step"]


def _shown_path(path: Path) -> str:
    """``models/base`` for a folder inside the checkout (the card's commands run from its root)."""
    from lmstudy.paths import REPO_ROOT

    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _exported(path: Path, run_id: str, step: int) -> bool:
    record = read_run_record(path)
    return record is not None and record.get("run") == run_id and record.get("step") == step


def export_base(config: BaseConfig, dest: Path, scale: str, evaluate=None, force: bool = False) -> list[Path]:
    """Step 4: one Hugging Face folder per kept checkpoint under ``dest`` (module docstring). Works on
    a run still training too: the checkpoints it has reached are exported. A folder already exported
    from the same run and step is left as it is unless ``force``.

    ``evaluate(model, tokenizer) -> rows`` (the protocol's table as records) fills the card's protocol section.
    """
    run = base_run(config)
    data = finished_data_run(config.data).metrics
    log = read_log_records(run.log_path)
    flops = flops_per_token(config.model, data["vocab_size"])
    paths = []
    for fraction, step in config.kept_steps().items():
        path = Path(dest) / checkpoint_name(fraction)
        exported = _exported(path, f"{run.study}/{run.hash}", step)
        if not (run.checkpoint_dir / f"step-{step:09d}" / "state.json").is_file() and (force or not exported):
            continue  # not reached yet (or, after a restore, exported before and not to be redone)
        if force or not exported:
            model, tokenizer = load_checkpoint_model(config, fraction)
            protocol = evaluate(model, tokenizer) if evaluate else []
            tokens = step * config.tokens_per_step
            record = {
                "name": path.name, "path": _shown_path(path), "scale": scale, "fraction": fraction, "step": step,
                "max_steps": config.max_steps, "tokens": tokens, "train_flops": tokens * flops,
                "parameters": count_parameters(model), "train_s": _train_seconds_at(log, step),
                "config": run_config(config), "run": f"{run.study}/{run.hash}", "data": data,
                "protocol": protocol, "log": [r for r in log if r.get("step", 0) <= step],
            }
            export_folder(model, tokenizer, path, record, dtype="float16")
        # The card is always written anew from the record: cheap, and a changed card text reaches every folder.
        record = read_run_record(path)
        record["path"] = _shown_path(path)
        write_model_card(path, model_card(record))
        paths.append(path)
    if not paths:
        raise FileNotFoundError(f"the base run {run.path} has reached no kept checkpoint yet "
                                f"(steps {sorted(config.kept_steps().values())}): python -m lmstudy base train --scale {scale}")
    return paths


# ---------------------------------------------------------------------------------------------------
# What the studies start from
# ---------------------------------------------------------------------------------------------------


@dataclass
class StudyBase:
    """One kept checkpoint of the shared base, as a transformer study starts from it."""

    model: GPT2LMHeadModel  # float32, eval mode: the study copies it before changing anything
    tokenizer: object
    name: str  # the folder name: base, base-30pct, base-10pct
    fraction: float  # of the base run's training budget
    tokens: int  # training tokens the checkpoint saw
    identity: dict  # what names these weights in a study's run config (run and step of the base)


def study_base(scale: str, fraction: float = 1.0, overrides: dict | None = None) -> StudyBase:
    """The shared base of ``scale`` at its kept checkpoint ``fraction`` (1.0, 0.3 or 0.1 by default);
    ``overrides``: changes to the scale's preset (:func:`final_config`; a paper-scale dry run's small budget).

    Read from the shipped folder ``models_dir(scale)/<name>`` when it was exported from this scale's run (its
    ``lmstudy_run.json`` says which run and step), else from the kept checkpoint in the run cache, training
    the base first if it never ran (seconds at smoke scale). Either way the weights are the float16 ones
    that are shipped, widened to float32, so a study gets the same numbers from a fresh clone as from the
    machine that trained the base.
    """
    config = final_config(scale, **(overrides or {}))
    identity, tokens = checkpoint_identity(scale, fraction, overrides)
    run_id, step = identity["base"], identity["step"]
    folder = models_dir(scale) / checkpoint_name(fraction)
    if _exported(folder, run_id, step):
        model = GPT2LMHeadModel.from_pretrained(str(folder), torch_dtype=torch.float32)
        tokenizer = load_tokenizer(folder)
    else:
        train_base(config)
        model, tokenizer = load_checkpoint_model(config, fraction)
        model.to(torch.float16).to(torch.float32)  # the shipped precision (export_base saves float16)
    return StudyBase(model=model.eval(), tokenizer=tokenizer, name=checkpoint_name(fraction), fraction=fraction,
                     tokens=tokens, identity=identity)


def checkpoint_identity(scale: str, fraction: float = 1.0, overrides: dict | None = None) -> tuple[dict, int]:
    """:func:`study_base`'s ``identity`` and ``tokens``, from the config alone: a study names its runs by them
    without reading the base's weights (tables drawn again from archived runs need none)."""
    config = final_config(scale, **(overrides or {}))
    steps = config.kept_steps()
    if fraction not in steps:
        raise ValueError(f"the {scale} base keeps checkpoints at {sorted(steps)} of its budget, not {fraction}")
    step = steps[fraction]
    return {"base": f"{STUDY}/{base_run(config).hash}", "step": step}, step * config.tokens_per_step


def loaded_study_base(scale: str, fraction: float = 1.0, overrides: dict | None = None) -> StudyBase:
    """:func:`study_base`, loaded once per process: the same object for the same arguments, so its model is
    shared and a caller copies it before changing it."""
    return _loaded_study_base(scale, fraction, json.dumps(overrides or {}, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _loaded_study_base(scale: str, fraction: float, overrides_json: str) -> StudyBase:
    return study_base(scale, fraction, overrides=json.loads(overrides_json))


def base_streams(scale: str, overrides: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The base's training and validation token streams (int64), for continued training on the base's own
    text (re-encoded with the base's tokenizer when the data run came from an archive without them);
    ``overrides`` as :func:`study_base`'s."""
    run = prepare_data(final_config(scale, **(overrides or {})).data)
    return load_stream(run.path / "train.bin"), load_stream(run.path / "valid.bin")


PRETRAINED_DATA_STUDY = "pretrained_data"


def pretrained_streams(init_from: str, data_fraction: float = 1.0,
                       valid_tokens_per_domain: int = 20_000) -> tuple[torch.Tensor, torch.Tensor]:
    """The base's training and validation text (the same documents, the evaluation-leak filter included) as
    token streams of a pretrained model's tokenizer (``init_from``: ``smollm2`` or any folder with a
    ``tokenizer.json``; :func:`lmstudy.pretrained.resolve_pretrained`), every document followed by its eos.
    Cached per tokenizer (its file's sha256) and the data settings, like the base's own data run; the tokenizer
    must fit uint16 streams (SmolLM2's 49,152 ids do)."""
    from lmstudy.pretrained import resolve_pretrained
    from lmstudy.pretrained_fetch import sha256_of

    folder = resolve_pretrained(init_from)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder} has no tokenizer.json: the streams are keyed by it")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if len(tokenizer) > 65_536:
        raise ValueError(f"{init_from}'s tokenizer has {len(tokenizer):,} ids; the streams are uint16 (at most 65,536)")
    config = BaseDataConfig(vocab_size=len(tokenizer), data_fraction=data_fraction,
                            valid_tokens_per_domain=valid_tokens_per_domain)
    key = {"tokenizer_sha256": sha256_of(folder / "tokenizer.json"), **asdict(config)}
    run = get_run(PRETRAINED_DATA_STUDY, key)
    with main_process_first():
        cached(PRETRAINED_DATA_STUDY, key, lambda run: _write_data(run, config, tokenizer))
    return load_stream(run.path / "train.bin"), load_stream(run.path / "valid.bin")


def plot_loss_curve(config: BaseConfig):
    """Training and validation loss of the base run against tokens, with the kept checkpoints marked."""
    import matplotlib.pyplot as plt

    log = read_log_records(base_run(config).log_path)
    train_rows = [r for r in log if r.get("kind") == "train"]
    valid_rows = [r for r in log if r.get("kind") == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4))
    per_step = config.tokens_per_step / 1e6
    ax.plot([r["step"] * per_step for r in train_rows], [r["loss"] for r in train_rows], lw=0.8, alpha=0.6,
            label="training batch loss")
    ax.plot([r["step"] * per_step for r in valid_rows], [r["val_loss"] for r in valid_rows], "o-", ms=3,
            label="validation loss (our domains' valid parts)")
    for fraction, step in config.kept_steps().items():
        ax.axvline(step * per_step, color="grey", ls=":", lw=0.8)
        ax.text(step * per_step, ax.get_ylim()[1], f" {fraction:.0%}", va="top", fontsize=8, color="grey")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"Base {size_label(config.model)}: loss curve")
    ax.legend()
    fig.tight_layout()
    return fig


__all__ = [
    "BaseConfig", "BaseDataConfig", "BaseModelConfig", "DOMAINS", "StudyBase", "base_run", "base_streams",
    "build_model", "checkpoint_name", "export_base", "final_config", "flops_per_token", "gpt2_config",
    "load_checkpoint_model", "load_stream", "model_card", "model_config", "non_embedding_parameters",
    "plot_loss_curve", "prepare_data", "pretrained_streams", "size_label", "study_base", "train_base",
    "training_documents", "validation_curve",
]
