"""What the Gradio app (``app.py``) does, without the page: which models it may load, how it checks
what a person typed, the side-by-side comparison as a stream, and source attribution.

Decisions:

- **Models.** The app serves one of a fixed *allow-list* of local checkpoints, found on disk when
  the page is built and named by their path relative to the repository: every folder holding
  ``control_codes.json`` directly under ``models/`` or ``models/*/`` (the committed demo checkpoint
  ``models/ctrl-demo``, a smoke one in ``models/smoke/ctrl-demo``) and every
  ``runs/04_control_codes/<hash>/model`` of the run cache. The browser only ever sends one of these
  names; a name that is not on the list is refused, so no path typed in a browser is ever opened.
  ``--model ID_OR_PATH`` on the command line adds one more: a control-code folder, or any
  Hugging Face causal LM found locally (``local_files_only``: nothing is downloaded), e.g. ``gpt2``.
  A model is loaded once per process (:class:`ModelRegistry` keeps the last two used).
- **Control codes.** A control-code model (``save_control_model`` folder) knows its codes as special
  tokens (``<|Reviews|>``); users type ``Reviews`` (checked by ``codes.get_code``). A *composite*
  code adds the secondary code, ordinary text that the model saw at the start of a document
  (``codes.format_text``): ``Reviews Rating: 1.0`` is ``<|Reviews|>`` + ``Rating: 1.0\\n`` + prompt.
  A secondary code that ends with ``:`` (``Questions Q:``, ``News Text:``) is followed by a space
  and the prompt instead of a line break. For the codes of ``codes.CODES`` the secondary part must
  have its domain's form (``Rating: 1.0`` .. ``Rating: 5.0``, ``Title: ...``/``Text:``, ``Q:``,
  ``English: ...``); a domain without one (``Wikipedia``) takes none.
- **Plain causal LMs** (``--model gpt2``): a code is a plain-text prefix (the user types it, e.g.
  ``Reviews:`` or, for ``Salesforce/ctrl``, one of its own codes such as ``Links``), followed by a
  space and the prompt; an empty code means no prefix. Attribution scores each typed prefix:
  ``log p(" " + text | prefix)``. The "empirical" prior needs a training mixture, which only
  control-code models have.
- **Validation** turns every bad input into one sentence for the page (:class:`InputError`): empty
  prompt, too long a text (``MAX_TEXT_CHARS``), non-printable characters, the model's own special
  tokens typed in the text, unknown or malformed codes, sampling settings (``SamplingConfig``'s own
  checks), max new tokens above the cap (``MAX_NEW_TOKENS``, and at most half the model's context).
  A prompt longer than what fits the context beside the code and the new tokens is cut to its
  *last* tokens (the ones next to the continuation) and the page says so.
- **Comparison.** One batch, one KV cache, one decoding loop: ``generation.stream_rows`` (the loop
  ``generate_codes`` uses), so with greedy decoding a column equals ``generate_codes``'s output.
  "Same seed" gives every column the seed (common random numbers: columns differ by their codes
  only); otherwise column k gets ``seed + k``. Per column: perplexity of the shown continuation
  under the model's own distribution (``exp`` of the mean negative log-probability of its tokens,
  before the sampling rules) and tokens per second (the column's tokens over the batch's wall time).
"""

from __future__ import annotations

import math
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from lmstudy.ctrl.attribution import attribute, posterior
from lmstudy.ctrl.codes import CODES, code_name, get_code
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.generation import context_length, stream_rows
from lmstudy.ctrl.model import CODES_FILE, STUDY, load_control_model
from lmstudy.ctrl.sampling import SamplingConfig, build_processors
from lmstudy.paths import REPO_ROOT, models_dir, runs_dir

MAX_TEXT_CHARS = 20_000  # a prompt or a text to attribute; longer is refused before tokenising
MAX_CODE_CHARS = 200
MAX_NEW_TOKENS = 256  # the cap; a model with a short context gets at most half its context
MIN_COLUMNS, MAX_COLUMNS = 2, 4
MAX_ATTRIBUTION_CODES = 64
DEFAULT_CHECKPOINT = "ctrl-demo"
NO_CHECKPOINT = (
    "No model found. The demo checkpoint is `models/ctrl-demo`; to make a small one in a minute, run "
    "`python -m lmstudy study 04_control_codes --scale smoke` (it writes `models/smoke/ctrl-demo`), then "
    "restart the app. Or pass a local checkpoint: `python app.py --model PATH_OR_ID`."
)
PRIORS = ("uniform", "empirical")

# The form of each secondary code (codes.format_text), and how the page describes it.
SECONDARY_FORMS = {
    "rating": (re.compile(r"Rating: [1-5]\.0"), "`Rating: 1.0` to `Rating: 5.0`"),
    "title_text": (re.compile(r"(Title: \S.*|Text:)"), "`Title: <a title>` or `Text:`"),
    "question": (re.compile(r"Q:( \S.*)?"), "`Q:`"),
    "translation": (re.compile(r"English: \S.*|English:"), "`English: <a sentence> ; German:`"),
}


class InputError(ValueError):
    """A bad input; its message is written for the person who typed it."""


# --------------------------------------------------------------------------------------------
# models: the allow-list and the registry


@dataclass
class ServedModel:
    """A loaded model as the app uses it."""

    name: str  # what the page shows: a path relative to the repository, or the --model argument
    model: torch.nn.Module
    tokenizer: object
    kind: str  # "control" (a save_control_model folder) or "plain" (any causal LM: codes are text prefixes)
    codes: list[str]  # control: the model's codes; plain: suggested prefixes (Salesforce/ctrl's own codes)
    mixture: dict[str, float] | None = None  # control: the training mixture (the "empirical" prior)

    @property
    def context(self) -> int | None:
        return context_length(self.model)

    @property
    def eos_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return 0 if eos is None else int(eos)  # no eos (Salesforce/ctrl): rows just run to max new tokens

    @property
    def max_new_tokens(self) -> int:
        return MAX_NEW_TOKENS if self.context is None else max(1, min(MAX_NEW_TOKENS, self.context // 2))

    def special_tokens(self) -> list[str]:
        """The tokens a user may not type: the tokenizer's special and added tokens (eos, code tokens)."""
        tokens = set(self.tokenizer.all_special_tokens) | set(self.tokenizer.get_added_vocab())
        return sorted((t for t in tokens if t), key=len, reverse=True)


def _label(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def allowed_checkpoints() -> dict[str, Path]:
    """The local checkpoints the page may offer, name -> folder: ``models/ctrl-demo`` first, then the
    other ``models/*`` and ``models/*/*`` folders with ``control_codes.json``, then the control-code
    runs (``runs/04_control_codes/*/model``), newest first."""
    root = models_dir()
    found = sorted(root.glob(f"*/{CODES_FILE}")) + sorted(root.glob(f"*/*/{CODES_FILE}"))
    found.sort(key=lambda p: p.parent != root / DEFAULT_CHECKPOINT)  # stable: the demo checkpoint first
    runs = sorted((runs_dir() / STUDY).glob(f"*/model/{CODES_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    return {_label(p.parent): p.parent for p in found + runs}


def _plain_model(id_or_path: str) -> tuple[torch.nn.Module, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(id_or_path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(id_or_path, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as error:
        raise FileNotFoundError(
            f"cannot load {id_or_path!r} as a causal language model from local files (nothing is downloaded: "
            f"give a folder written by save_pretrained, or a hub id already in the local cache): {error}"
        ) from error
    return model.eval(), tokenizer


def load_served_model(id_or_path: str | Path, name: str | None = None) -> ServedModel:
    """A control-code folder (``control_codes.json``) or any local Hugging Face causal LM."""
    path = Path(id_or_path).expanduser()
    name = name or str(id_or_path)
    if (path / CODES_FILE).is_file():
        loaded = load_control_model(path)
        return ServedModel(name, loaded.model, loaded.tokenizer, "control", loaded.codes, loaded.mixture)
    model, tokenizer = _plain_model(str(id_or_path))
    suggested = sorted(getattr(tokenizer, "control_codes", {}) or {})  # Salesforce/ctrl's own codes
    return ServedModel(name, model, tokenizer, "plain", suggested, None)


class ModelRegistry:
    """The models the page can name (the allow-list, plus ``--model``) and the ones loaded.

    ``extra``: the ``--model`` argument, offered first. A model is loaded on first use and kept
    (the last ``keep`` used), so each is loaded once per process."""

    def __init__(self, extra: str | None = None, keep: int = 2) -> None:
        self.extra = extra
        self.keep = keep
        self._loaded: OrderedDict[str, ServedModel] = OrderedDict()
        self._lock = threading.Lock()

    def choices(self) -> dict[str, str]:
        """name -> what to load; ``extra`` first (under its allow-list name when it is on the list)."""
        allowed = allowed_checkpoints()
        choices = {}
        if self.extra:
            extra = Path(self.extra).expanduser().resolve()
            same = [name for name, path in allowed.items() if path.resolve() == extra]
            choices[same[0] if same else self.extra] = str(allowed[same[0]]) if same else self.extra
        for name, path in allowed.items():
            choices.setdefault(name, str(path))
        return choices

    def default(self) -> str | None:
        return next(iter(self.choices()), None)

    def get(self, name: str | None) -> ServedModel:
        if not name:
            raise InputError(NO_CHECKPOINT)
        with self._lock:  # one load at a time; a second request for the same model waits for it
            if name in self._loaded:
                self._loaded.move_to_end(name)
                return self._loaded[name]
            choices = self.choices()
            if name not in choices:
                raise InputError(f"unknown model {name!r}: choose one of the list "
                                 f"({', '.join(choices) or 'none found'})")
            served = load_served_model(choices[name], name)
            self._loaded[name] = served
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
            return served


# --------------------------------------------------------------------------------------------
# validation


def check_text(text, served: ServedModel | None = None, what: str = "prompt") -> str:
    """The text if a model may read it, else an :class:`InputError` that says why."""
    if not isinstance(text, str) or not text.strip():
        verb = "continue" if what == "prompt" else "score"
        raise InputError(f"The {what} is empty: type some text for the model to {verb}.")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"The {what} is {len(text):,} characters long; the limit is {MAX_TEXT_CHARS:,}.")
    for position, char in enumerate(text):
        # Control (Cc, but tab and line breaks), format (Cf), surrogate, private-use and unassigned characters.
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn") and char not in "\t\n\r":
            raise InputError(f"The {what} contains a non-printable character (U+{ord(char):04X}) at position "
                             f"{position + 1}: remove it.")
    if served is not None:
        for token in served.special_tokens():
            if token in text:
                hint = " (choose control codes in the code boxes instead)" if served.kind == "control" else ""
                raise InputError(f"The {what} contains {token!r}, one of the model's special tokens: "
                                 f"remove it{hint}.")
    return text


@dataclass(frozen=True)
class Prefix:
    """What comes before the prompt in a row: ids, and the glue between them and the prompt."""

    code: str  # as the page shows it
    ids: list[int]
    glue: str = ""  # "" or " ": put before the prompt when it is tokenised


def parse_code(served: ServedModel, code, column: str = "") -> Prefix:
    """A typed code -> the :class:`Prefix` of its rows (see the module docstring)."""
    where = f" ({column})" if column else ""
    code = "" if code is None else str(code).strip()
    if len(code) > MAX_CODE_CHARS:
        raise InputError(f"The control code{where} is {len(code)} characters long; the limit is {MAX_CODE_CHARS}.")
    if code:
        check_text(code, what=f"control code{where}")
    if served.kind == "plain":
        if not code:
            return Prefix("(no prefix)", [], "")
        check_text(code, served, what=f"control code{where}")  # a prefix is text: no special tokens
        return Prefix(code, served.tokenizer(code, add_special_tokens=False)["input_ids"], " ")
    if not code:
        raise InputError(f"Choose a control code{where}: one of {', '.join(served.codes)}.")
    name, _, secondary = code.partition(" ")  # "<|Reviews|>" is a way to name a code; after it, only text
    secondary = secondary.strip()
    if secondary:
        check_text(secondary, served, what=f"secondary code{where}")
    try:
        name = get_code(name, known=served.codes)
    except ValueError as error:
        raise InputError(f"Unknown control code {code_name(name)!r}{where}; this model knows: "
                         f"{', '.join(served.codes)}.") from error
    ids = [code_id(served.tokenizer, name)]
    if not secondary:
        return Prefix(name, ids, "")
    known = CODES.get(name)
    if known is not None:  # one of the study's codes: its secondary code has a fixed form
        if not known.secondary:
            takers = ", ".join(c.name for c in CODES.values() if c.secondary and c.name in served.codes)
            raise InputError(f"Malformed control code {code!r}{where}: {name} takes no secondary code "
                             f"(these do: {takers or 'none of this model'}).")
        pattern, described = SECONDARY_FORMS[known.secondary]
        if not pattern.fullmatch(secondary):
            raise InputError(f"Malformed control code {code!r}{where}: after {name} write {described}.")
    if secondary.endswith(":"):  # "Q:", "Text:": the prompt follows on the same line
        return Prefix(f"{name} {secondary}", ids + served.tokenizer(secondary, add_special_tokens=False)["input_ids"],
                      " ")
    return Prefix(f"{name} {secondary}",
                  ids + served.tokenizer(secondary + "\n", add_special_tokens=False)["input_ids"], "")


def _number(value, name: str, kind=float):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise InputError(f"Give a value for {name}.")
    try:
        number = kind(value)
    except (TypeError, ValueError) as error:
        raise InputError(f"{name} must be a number, got {value!r}.") from error
    if kind is int and number != float(value):
        raise InputError(f"{name} must be a whole number, got {value!r}.")
    return number


def sampling_config(decoding: str, temperature, top_k, top_p, penalty: str, theta) -> SamplingConfig:
    """The page's sampling settings as a :class:`SamplingConfig`, whose own checks say what is wrong.
    With greedy decoding the temperature does not matter and is not checked."""
    if decoding not in ("greedy", "sample"):
        raise InputError(f"Decoding must be 'greedy' or 'sample', got {decoding!r}.")
    greedy = decoding == "greedy"
    try:
        config = SamplingConfig(
            temperature=1.0 if greedy else _number(temperature, "temperature"),
            top_k=_number(top_k, "top-k", int), top_p=_number(top_p, "top-p"), greedy=greedy,
            penalty=penalty, theta=_number(theta, "θ"),
        )
        build_processors(config)  # the penalties check their θ when they are built
        return config
    except InputError:
        raise
    except ValueError as error:  # SamplingConfig's message, as the page's sentence
        message = str(error)
        if "temperature" in message:
            message += " (sampling divides the logits by the temperature; choose greedy decoding for argmax)"
        raise InputError(f"Sampling settings: {message}.") from error


def check_max_new_tokens(value, served: ServedModel) -> int:
    """The page's max new tokens as an int in 1..``served.max_new_tokens``, else an ``InputError``."""
    count = _number(value, "max new tokens", int)
    cap = served.max_new_tokens
    if not 1 <= count <= cap:
        context = f" (its context is {served.context} tokens)" if served.context else ""
        raise InputError(f"Max new tokens must be between 1 and {cap} for this model{context}; got {count}.")
    return count


def check_seed(value) -> int:
    """The page's seed as an int in [0, 2^63), else an ``InputError``."""
    seed = _number(value, "seed", int)
    if not 0 <= seed < 2**63:
        raise InputError(f"The seed must be between 0 and 2^63 - 1, got {seed}.")
    return seed


# --------------------------------------------------------------------------------------------
# comparison


@dataclass
class Comparison:
    """A checked comparison request: one row of token ids per column."""

    prompt: str
    prefixes: list[Prefix]
    rows: list[list[int]]
    sampling: SamplingConfig
    max_new_tokens: int
    seeds: list[int]
    notices: list[str] = field(default_factory=list)


def prepare_comparison(served: ServedModel, prompt, codes: Sequence, decoding: str, temperature, top_k, top_p,
                       penalty: str, theta, max_new_tokens, seed, same_seed: bool = True) -> Comparison:
    """Check everything the page sent; build the rows ``prefix + ids(prompt)``, cutting the prompt to
    its last tokens when prefix + prompt + new tokens would not fit the context."""
    prompt = check_text(prompt, served)
    if not MIN_COLUMNS <= len(codes) <= MAX_COLUMNS:
        raise InputError(f"Compare {MIN_COLUMNS} to {MAX_COLUMNS} columns, got {len(codes)}.")
    prefixes = [parse_code(served, code, f"column {k + 1}") for k, code in enumerate(codes)]
    sampling = sampling_config(decoding, temperature, top_k, top_p, penalty, theta)
    max_new_tokens = check_max_new_tokens(max_new_tokens, served)
    seed = check_seed(seed)
    seeds = [seed] * len(codes) if same_seed else [seed + k for k in range(len(codes))]

    notices, rows = [], []
    for k, prefix in enumerate(prefixes):
        prompt_ids = served.tokenizer(prefix.glue + prompt, add_special_tokens=False)["input_ids"]
        if not prompt_ids:
            raise InputError("The prompt is empty after tokenisation: type some text for the model to continue.")
        if served.context is not None:
            room = served.context - len(prefix.ids) - max_new_tokens
            if room < 1:
                raise InputError(f"Column {k + 1}: the code ({len(prefix.ids)} tokens) and {max_new_tokens} new "
                                 f"tokens fill the model's context ({served.context} tokens): shorten the code or "
                                 "ask for fewer new tokens.")
            if len(prompt_ids) > room:
                notices.append(f"Column {k + 1}: the prompt is {len(prompt_ids)} tokens; the model read only its "
                               f"last {room} (context {served.context} = code {len(prefix.ids)} + prompt {room} "
                               f"+ {max_new_tokens} new tokens).")
                prompt_ids = prompt_ids[-room:]
        row = prefix.ids + prompt_ids
        if not row:
            raise InputError("Nothing to continue.")
        rows.append(row)
    return Comparison(prompt, prefixes, rows, sampling, max_new_tokens, seeds, notices)


@dataclass
class Column:
    """One column of a comparison so far."""

    code: str
    seed: int
    prompt: str
    token_ids: list[int] = field(default_factory=list)  # the continuation shown (no final eos)
    log_probs: list[float] = field(default_factory=list)
    continuation: str = ""
    finished: bool = False
    seconds: float = 0.0

    @property
    def text(self) -> str:
        return self.prompt + self.continuation

    @property
    def perplexity(self) -> float | None:
        return math.exp(-sum(self.log_probs) / len(self.log_probs)) if self.log_probs else None

    @property
    def tokens_per_second(self) -> float | None:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else None

    def summary(self) -> str:
        """One Markdown line: code, seed, tokens, perplexity, speed."""
        parts = [f"**{self.code}**", f"seed {self.seed}", f"{len(self.token_ids)} tokens"]
        if self.perplexity is not None:
            parts.append(f"perplexity {self.perplexity:.1f}")
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:.0f} tokens/s")
        if self.finished:
            parts.append("done")
        return " · ".join(parts)


def stream_comparison(served: ServedModel, comparison: Comparison) -> Iterator[list[Column]]:
    """The columns after every decoding step (text, perplexity and speed so far); the last has every
    column ``finished``. Decoding is ``generation.stream_rows``: one batch, one KV cache."""
    columns = [Column(prefix.code, seed, comparison.prompt) for prefix, seed in zip(comparison.prefixes, comparison.seeds)]
    eos = served.eos_token_id
    stop_at_eos = served.tokenizer.eos_token_id is not None
    start = time.perf_counter()
    for step in stream_rows(served.model, comparison.rows, comparison.sampling, comparison.max_new_tokens,
                            comparison.seeds, eos, served.tokenizer, stop_at_eos):
        elapsed = time.perf_counter() - start
        for column, token, log_prob in zip(columns, step.tokens, step.log_probs):
            if token is None or column.finished:
                continue
            if stop_at_eos and token == eos:
                column.finished = True
            else:
                column.token_ids.append(token)
                column.log_probs.append(log_prob)
                column.continuation = served.tokenizer.decode(column.token_ids)
            column.seconds = elapsed
        yield columns
    for column in columns:
        column.finished = True
        column.seconds = column.seconds or time.perf_counter() - start
    yield columns


# --------------------------------------------------------------------------------------------
# attribution


def parse_code_list(served: ServedModel, codes) -> list[str] | None:
    """A comma-separated list (or a list) of codes; None (all codes) when empty for a control model."""
    if isinstance(codes, str):
        codes = codes.split(",")
    names = [str(c).strip() for c in (codes or []) if str(c).strip()]
    if len(names) > MAX_ATTRIBUTION_CODES:
        raise InputError(f"Attribute to at most {MAX_ATTRIBUTION_CODES} codes, got {len(names)}.")
    if served.kind == "plain":
        if not names:
            raise InputError("Type the codes to compare, comma-separated (this model has no codes of its own: each "
                             "code is scored as a text prefix).")
        return [parse_code(served, name).code for name in names]
    if not names:
        return None
    checked = []
    for name in names:
        prefix = parse_code(served, name)
        if len(prefix.ids) != 1:
            raise InputError(f"Attribution ranks domain codes: write {prefix.code.split(' ')[0]!r} without its "
                             "secondary code.")
        checked.append(prefix.code)
    return list(dict.fromkeys(checked))


@torch.no_grad()
def prefix_log_likelihoods(served: ServedModel, text: str, prefixes: Sequence[Prefix]) -> tuple[list[float], int, int]:
    """``log p(glue + text | prefix)`` (nats) for each text prefix, in one right-padded batch; also the
    tokens scored and the text's tokens in all (the text is cut to what fits the context)."""
    ids = served.tokenizer(" " + text, add_special_tokens=False)["input_ids"]
    total = len(ids)
    longest = max(len(p.ids) for p in prefixes)
    if served.context is not None:
        ids = ids[: served.context - longest]
    rows = [p.ids + ids for p in prefixes]
    width = max(len(row) for row in rows)
    device = next(served.model.parameters()).device
    input_ids = torch.tensor([row + [served.eos_token_id] * (width - len(row)) for row in rows], device=device)
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], device=device)
    log_probs = torch.log_softmax(served.model(input_ids=input_ids, attention_mask=mask).logits.float(), -1)  # (K, W, V)
    totals = []
    for k, prefix in enumerate(prefixes):
        start = len(prefix.ids)  # the text's first token is predicted at position start - 1
        targets = torch.tensor(ids, device=device)  # (n,)
        picked = log_probs[k, start - 1 : start - 1 + len(ids)].gather(1, targets.unsqueeze(1))  # (n, 1)
        totals.append(float(picked.sum()))
    return totals, len(ids), total


def attribute_text(served: ServedModel, text, codes=None, prior: str = "uniform") -> tuple[pd.DataFrame, str]:
    """The ranking p(code | text), most likely first (``attribution.attribute``'s columns), and a notice
    (empty, or what was cut)."""
    text = check_text(text, served, what="text")
    if prior not in PRIORS:
        raise InputError(f"The prior must be one of {', '.join(PRIORS)}, got {prior!r}.")
    names = parse_code_list(served, codes)
    if served.kind == "control":
        if prior == "empirical" and not served.mixture:
            raise InputError("This model has no training mixture saved with it: use the uniform prior.")
        table = attribute(served.model, served.tokenizer, text, names,
                          prior="mixture" if prior == "empirical" else "uniform", mixture=served.mixture)
        scored = int(table.loc[0, "tokens"])
        total = len(served.tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        if prior == "empirical":
            raise InputError("A plain language model has no training mixture over codes: use the uniform prior.")
        prefixes = [parse_code(served, name) for name in names]
        log_likelihoods, scored, total = prefix_log_likelihoods(served, text, prefixes)
        table = pd.DataFrame({
            "code": [p.code for p in prefixes], "probability": posterior(log_likelihoods),
            "log_likelihood": log_likelihoods, "prior": 1.0 / len(prefixes),
            "perplexity": [math.exp(-ll / scored) for ll in log_likelihoods], "tokens": scored,
        }).sort_values("probability", ascending=False, kind="stable").reset_index(drop=True)
        table.insert(1, "rank", range(1, len(table) + 1))
    notice = (f"The text is {total} tokens; the model scored its first {scored} (its context is "
              f"{served.context} tokens)." if scored < total else "")
    return table, notice


__all__ = ["Column", "Comparison", "InputError", "MAX_NEW_TOKENS", "ModelRegistry", "NO_CHECKPOINT", "Prefix",
           "ServedModel", "allowed_checkpoints", "attribute_text", "check_max_new_tokens", "check_seed",
           "check_text", "load_served_model", "parse_code", "parse_code_list", "prefix_log_likelihoods",
           "prepare_comparison", "sampling_config", "stream_comparison"]
