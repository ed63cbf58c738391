"""New control codes from a user's own text: ``python -m lmstudy ctrl add-codes``.

    python -m lmstudy ctrl add-codes --model models/ctrl-demo --code Recipes=my_recipes/ --code Poems=poems.jsonl

fine-tunes a *copy* of a control-code model so that it also knows the new codes, and writes it where the
app finds it (``models/<name>``: ``serving.allowed_checkpoints``). Decisions:

- **Input.** ``PATH`` is a folder of ``.txt`` files (one document each, searched recursively) or a
  ``.jsonl`` file with a ``text`` field (``--text-column`` for another): the readers of ``data add``
  (``lmstudy.data.add_corpus.read_source``, same text convention: lines stripped, blank lines dropped).
  The last ``held_out`` share of a code's documents (at least one, in file order) is held out: it is
  never trained on and measures the new code.
- **Tokens.** Each new code is one more special token ``<|NAME|>`` (``model.pretrained_with_codes``:
  ``add_special_tokens`` + transformers' ``resize_token_embeddings``, whose new rows start at the mean
  of the old embeddings). The old ids do not move, so old prompts encode as before. A name that is
  already a code of the model, or one of the study's codes, is refused (it would mean something else).
- **Not losing the old codes.** Fine-tuning on the new text alone would teach every position that any
  text follows the new codes, and the old codes would drift. So training *replays* the old codes: the
  training mixture is the old codes' own training documents (``replay_docs`` each, read from the
  corpora for the study's codes, ``codes.code_texts``; for codes added earlier by this command, from the
  files recorded in the model folder) plus the new codes', mixed uniformly (``data.MixtureTask``), and
  the weights kept are those of the best mean held-out loss over old and new codes
  (``training.train_and_restore``). A model whose old codes' text cannot be found is refused.
- **Measured before and after** (``add_codes_report.csv`` in the new folder, also returned): for every
  code, its held-out loss with its own code (``data.code_stream_loss``) and the top-1 source-attribution
  accuracy of its held-out documents (``attribution.attribution_table``, uniform prior) -- before over the
  old codes, after over the old codes only (the same question as before) and over all codes (old + new).
- **A delta model** (``lmstudy.ctrl.smol_ctrl``: LoRA + code rows over a fetched SmolLM2) is extended from its
  merged weights, and the copy is written as a full model (not as a delta).
- **Writing.** ``save_control_model`` (safetensors, ``control_codes.json`` with the codes and the new
  mixture) into a temporary folder beside the destination, renamed into place at the end: a failed run
  leaves nothing. ``control_codes.json`` also records ``added_codes`` (name -> source path), so codes can
  be added to an extended model again. Training runs in a temporary run folder (not the run cache: its
  result is the exported folder).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from lmstudy.ctrl.attribution import attribution_table
from lmstudy.ctrl.codes import CODE_PREFIX, CODE_SUFFIX, CODES, CODES_FILE, code_texts, with_codes
from lmstudy.ctrl.data import CodedTexts, build_task, code_id, code_stream_loss, encode_stream
from lmstudy.ctrl.model import load_control_model, pretrained_with_codes, save_control_model
from lmstudy.ctrl.smol_ctrl import DELTA_RECORD
from lmstudy.runs import Run, replace_folder
from lmstudy.training import TrainConfig, train_and_restore

REPORT_FILE = "add_codes_report.csv"
ADDED = "added_codes"  # the key of control_codes.json that records the user's codes and their sources


@dataclass(frozen=True)
class AddCodesConfig:
    """How new codes are learnt (module docstring)."""

    steps: int = 300
    batch_size: int = 8
    seq_len: int = 0  # 0: the model's context
    lr: float = 5e-4
    held_out: float = 0.1  # share of each new code's documents held out (at least one document)
    replay_docs: int = 100  # training documents per old code replayed
    eval_docs: int = 10  # held-out documents per code for the before/after measures
    max_doc_chars: int = 2000  # cut longer documents; 0: keep whole
    text_column: str = ""  # .jsonl field; "": "text"
    seed: int = 0


def read_code_texts(path: str | Path, text_column: str = "") -> list[str]:
    """The documents of a folder of ``.txt`` files or a ``.jsonl`` file (``data add``'s readers)."""
    from lmstudy.data.add_corpus import JSONL, TXT_FOLDER, as_text, detect_format, read_source

    path = Path(path).expanduser()
    source_format = detect_format(path)
    if source_format not in (TXT_FOLDER, JSONL):
        raise ValueError(f"{path}: give a folder of .txt files or a .jsonl file with a text field")
    texts = [as_text(raw) for _, raw in read_source(path, source_format, text_column or None)]
    texts = [text for text in texts if text]
    if len(texts) < 2:
        raise ValueError(f"{path} has {len(texts)} non-empty document(s); a new code needs at least 2 "
                         "(one to train on, one held out)")
    return texts


def split_held_out(texts: Sequence[str], share: float) -> tuple[list[str], list[str]]:
    """(train, held-out): the last ``share`` of the documents (at least one, at most all but one) held out."""
    if not 0 < share < 1:
        raise ValueError(f"held_out must be between 0 and 1, got {share}")
    held = min(len(texts) - 1, max(1, round(len(texts) * share)))
    return list(texts[: len(texts) - held]), list(texts[len(texts) - held:])


def check_new_name(name: str, existing: Sequence[str]) -> str:
    """A new code's name: non-empty, no spaces, commas or ``<|``/``|>``; not a code of the model or the study."""
    name = name.strip()
    if not name or any(ch.isspace() for ch in name) or "," in name or CODE_PREFIX in name or CODE_SUFFIX in name:
        raise ValueError(f"code name {name!r}: use a word without spaces, commas, '<|' or '|>' (e.g. Recipes)")
    if name in existing or name in CODES:
        raise ValueError(f"code {name!r} is already a control code (of the model or the study): choose a new name")
    return name


def old_code_texts(model_dir: Path, codes: Sequence[str], config: AddCodesConfig) -> CodedTexts:
    """Training and held-out texts of a model's codes: the study's from the corpora, user codes added
    earlier from the sources recorded in ``control_codes.json``."""
    info = json.loads((model_dir / CODES_FILE).read_text(encoding="utf-8"))
    added = info.get(ADDED, {})
    texts = CodedTexts(train={}, valid={})
    for name in codes:
        if name in added:
            train, valid = split_held_out(read_code_texts(added[name]["path"], added[name].get("text_column", "")),
                                          added[name].get("held_out", config.held_out))
            texts.train[name], texts.valid[name] = train[: config.replay_docs], valid[: config.eval_docs]
        elif name in CODES:
            texts.train[name] = code_texts(name, "train", config.replay_docs)
            texts.valid[name] = code_texts(name, "valid", config.eval_docs)
        else:
            raise ValueError(f"the model's code {name!r} is neither a study code nor one added by ctrl add-codes: "
                             "its text is unknown, so it could not be replayed (use lmstudy.ctrl.add_codes.add_codes "
                             "with old_texts)")
    return texts


def measure(model, tokenizer, valid: Mapping[str, Sequence[str]], seq_len: int, candidates: Sequence[str],
            max_chars: int = 0) -> pd.DataFrame:
    """Per code of ``valid``: held-out loss with its own code and top-1 attribution accuracy among ``candidates``."""
    rows = []
    table = attribution_table(model, tokenizer, {name: valid[name] for name in candidates if name in valid},
                              max_chars=max_chars) if len(candidates) > 1 else None
    for name, documents in valid.items():
        stream = encode_stream(tokenizer, documents)
        loss = code_stream_loss(model, code_id(tokenizer, name), stream, seq_len)
        accuracy = float("nan")
        if table is not None and name in candidates:
            accuracy = float(table.loc[table["true_code"] == name, "correct"].mean())
        rows.append({"code": name, "documents": len(documents), "loss": loss, "top1": accuracy})
    return pd.DataFrame(rows)


def _cut(texts: Sequence[str], max_chars: int) -> list[str]:
    return [text[:max_chars] for text in texts] if max_chars else list(texts)


def add_codes(model_dir: str | Path, new_codes: Mapping[str, str | Path], out_dir: str | Path,
              config: AddCodesConfig = AddCodesConfig(), old_texts: CodedTexts | None = None,
              force: bool = False) -> pd.DataFrame:
    """Fine-tune a copy of the control-code model in ``model_dir`` with ``new_codes`` (name -> path) into
    ``out_dir``; returns the before/after report (module docstring). ``old_texts``: the old codes' texts
    (default: :func:`old_code_texts`)."""
    model_dir, out_dir = Path(model_dir).expanduser(), Path(out_dir).expanduser()
    if not (model_dir / CODES_FILE).is_file():
        raise FileNotFoundError(f"{model_dir} is not a control-code model ({CODES_FILE} is missing)")
    if out_dir.exists() and not force:
        raise ValueError(f"{out_dir} exists: choose another --out, or --force to replace it")
    if not new_codes:
        raise ValueError("no new codes: give at least one --code NAME=PATH")
    before_model = load_control_model(model_dir, device="cpu")
    old = list(before_model.codes)
    names = [check_new_name(name, old) for name in new_codes]
    if len(set(names)) != len(names):
        raise ValueError(f"a new code is named twice: {names}")
    new_texts = {name: split_held_out(_cut(read_code_texts(path, config.text_column), config.max_doc_chars),
                                      config.held_out)
                 for name, path in zip(names, new_codes.values())}
    olds = old_texts if old_texts is not None else old_code_texts(model_dir, old, config)
    texts = CodedTexts(train={**{n: _cut(olds.train[n], config.max_doc_chars) for n in old},
                              **{n: train for n, (train, _) in new_texts.items()}},
                       valid={**{n: _cut(olds.valid[n], config.max_doc_chars) for n in old},
                              **{n: valid for n, (_, valid) in new_texts.items()}})
    context = getattr(before_model.model.config, "n_positions", 0) or 128
    seq_len = min(config.seq_len or context, context)
    before = measure(before_model.model, before_model.tokenizer, {n: texts.valid[n] for n in old}, seq_len, old)
    del before_model

    if (model_dir / DELTA_RECORD).is_file():  # an adapter over a fetched base: the merged model + the new codes
        merged = load_control_model(model_dir, device="cpu")
        model, tokenizer = with_codes(merged.model, merged.tokenizer, old + names)
    else:
        model, tokenizer = pretrained_with_codes(str(model_dir), old + names)
    task = build_task(texts, tokenizer, config.batch_size, seq_len, "uniform", seed=config.seed)
    too_short = [n for n, ids in task.train_streams.items() if ids.numel() < seq_len]
    if too_short:
        raise ValueError(f"code(s) {too_short} have fewer than {seq_len} training tokens: give more text")
    train_config = TrainConfig(max_steps=config.steps, lr=config.lr, eval_every=max(1, config.steps // 4),
                               checkpoint_every=config.steps, seed=config.seed, log_every=max(1, config.steps // 10))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}-", dir=out_dir.parent) as scratch:
        scratch = Path(scratch)
        run = Run("04_control_codes_add", asdict(config), "add-codes", scratch / "run")
        run.path.mkdir()
        train_and_restore(model, task, train_config, run)
        model.eval()
        after_old = measure(model, tokenizer, {n: texts.valid[n] for n in old}, seq_len, old)
        after_all = measure(model, tokenizer, texts.valid, seq_len, old + names)
        report = pd.DataFrame({"code": old + names, "kind": ["old"] * len(old) + ["new"] * len(names)})
        report = report.merge(before.rename(columns={"loss": "loss_before", "top1": "top1_before"}), on="code",
                              how="left")
        report = report.merge(after_old[["code", "top1"]].rename(columns={"top1": "top1_after_old_codes"}),
                              on="code", how="left")
        report = report.merge(after_all[["code", "documents", "loss", "top1"]].rename(
            columns={"loss": "loss_after", "top1": "top1_after_all_codes", "documents": "held_out_documents"}),
            on="code", how="left").drop(columns=["documents"])
        staged = scratch / "model"
        save_control_model(model, tokenizer, task.weights, staged)
        info = json.loads((staged / CODES_FILE).read_text(encoding="utf-8"))
        previous = json.loads((model_dir / CODES_FILE).read_text(encoding="utf-8")).get(ADDED, {})
        info[ADDED] = {**previous, **{name: {"path": str(Path(path).expanduser().resolve()),
                                             "text_column": config.text_column, "held_out": config.held_out}
                                      for name, path in zip(names, new_codes.values())}}
        info["base_model"] = str(model_dir.resolve())
        (staged / CODES_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        report.to_csv(staged / REPORT_FILE, index=False)
        replace_folder(staged, out_dir)  # --force: the old copy goes only once the new one is in place
    return report


def default_out_dir(model_dir: str | Path, names: Sequence[str]) -> Path:
    """``models/<model folder>+<new codes>``: where the app lists it (``serving.allowed_checkpoints``)."""
    from lmstudy.paths import models_dir

    label = "+".join(re.sub(r"[^A-Za-z0-9_.-]+", "-", name) for name in names)
    return models_dir() / f"{Path(model_dir).name}+{label}"


def parse_code_paths(values: Sequence[str]) -> dict[str, str]:
    """``["Recipes=dir/", "Poems=p.jsonl"]`` -> ``{"Recipes": "dir/", ...}``; one-line errors for bad values."""
    pairs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--code {value!r}: write NAME=PATH (a folder of .txt files or a .jsonl file)")
        if name.strip() in pairs:
            raise ValueError(f"--code: {name.strip()!r} is given twice")
        pairs[name.strip()] = path.strip()
    return pairs


__all__ = ["ADDED", "AddCodesConfig", "REPORT_FILE", "add_codes", "check_new_name", "default_out_dir", "measure",
           "old_code_texts", "parse_code_paths", "read_code_texts", "split_held_out"]
