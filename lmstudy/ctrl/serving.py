"""What the Gradio app (``app.py``) does, without the page: which models it may load, how it checks
what a person typed, the side-by-side comparison as a stream, and source attribution.

Decisions:

- **Models.** The app serves one of a fixed *allow-list* of local checkpoints, found on disk when
  the page is built and named by their path relative to the repository: every folder holding
  ``control_codes.json`` directly under ``models/`` or ``models/*/`` (the committed demo checkpoint
  ``models/ctrl-demo``, a smoke one in ``models/smoke/ctrl-demo``, the copies ``ctrl add-codes`` writes to
  ``models/<model>+<codes>``) and every
  ``runs/04_control_codes/<hash>/model`` of the run cache. The browser only ever sends one of these
  names; a name that is not on the list is refused, so no path typed in a browser is ever opened.
  ``--model ID_OR_PATH`` on the command line adds one more: a control-code folder, or any
  Hugging Face causal LM found locally (``local_files_only``: nothing is downloaded), GPT-2 or Llama family,
  e.g. ``smollm2`` (the fetched SmolLM2-135M, :mod:`lmstudy.pretrained_fetch`) or ``gpt2``.
  A model is loaded once per process (:class:`ModelRegistry` keeps the last two used).
- **Control codes.** A control-code model (``save_control_model`` folder) knows its codes as special
  tokens (``<|Reviews|>``); users type ``Reviews`` (checked by ``codes.get_code``). A *composite*
  code adds the secondary code, ordinary text that the model saw at the start of a document
  (``codes.format_text``): ``Reviews Rating: 1.0`` is ``<|Reviews|>`` + ``Rating: 1.0\\n`` + prompt.
  A secondary code that ends with ``:`` (``Questions Q:``, ``News Text:``) is followed by a space
  and the prompt instead of a line break. For the codes of ``codes.CODES`` the secondary part must
  have its domain's form (``Rating: 1.0`` .. ``Rating: 5.0``, ``Title: ...``/``Text:``, ``Q:``,
  ``English: ...``, a URL after ``Links``) or, *code-mixing* (the paper's Table 5), another domain's
  form: ``r/Sports English:``, ``Wikipedia Q:`` (``codes.check_secondary``); text of no known form is refused.
- **Plain causal LMs** (``--model gpt2``): a code is a plain-text prefix (the user types it, e.g.
  ``Reviews:`` or, for ``Salesforce/ctrl``, one of its own codes such as ``Links``), followed by a
  space and the prompt; an empty code means no prefix. Attribution scores each typed prefix:
  ``log p(" " + text | prefix)``. The "empirical" prior needs a training mixture, which only
  control-code models have.
- **Validation** turns every bad input into one sentence for the page (:class:`InputError`): empty
  prompt, too long a text (``MAX_TEXT_CHARS``), non-printable characters (the joiners of emoji
  sequences and of some scripts are printable), the model's own special tokens typed in the text,
  unknown or malformed codes, a value outside a radio button's or a dropdown's choices
  (:func:`check_choice`), and every numeric field (:class:`NumberField`: a number or a string holding
  one, finite, whole where it counts something -- a fraction is refused, never rounded -- and within
  its bounds: the sampling settings, a seed below 2^63, max new tokens up to ``MAX_NEW_TOKENS`` and at
  most half the model's context). One check per kind of field, the same for the page and the API: the
  app hands the handlers the raw values (Gradio's own preprocessing off), so nothing reaches the model
  unchecked and no bad value ends in a traceback.
  A prompt longer than what fits the context beside the code and the new tokens is cut to its
  *last* tokens (the ones next to the continuation) and the page says so.
- **Showing what was typed**: a code is shown in a column's Markdown stats line through
  :func:`markdown_literal` (HTML escaped, Markdown punctuation backslashed), so it is shown, not rendered.
  A code's tabs, line breaks and Unicode spaces (a pasted no-break space) are plain spaces, a run of them one
  (:func:`normalize_code_spaces`). A message quotes what was sent through :func:`quoted`: as typed, never a
  Python escape, an invisible character named in words (``'Reviews[tab]Rating:'``).
- **One model thread.** Loading, every decoding step and every attribution run on one thread
  (:func:`run_on_model_thread`, :func:`on_model_thread`; why: the comment above them).
- **Comparison.** One batch, one KV cache, one decoding loop: ``generation.stream_rows`` (the loop
  ``generate_codes`` uses), so with greedy decoding a column equals ``generate_codes``'s output.
  "Same seed" gives every column the seed (common random numbers: columns differ by their codes
  only); otherwise column k gets ``seed + k``. Per column: perplexity of the shown continuation
  under the model's own distribution (``exp`` of the mean negative log-probability of its tokens,
  before the sampling rules) and tokens per second (the column's tokens over the batch's wall time).
"""

from __future__ import annotations

import html
import math
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from lmstudy.ctrl.attribution import attribute, posterior
from lmstudy.ctrl.codes import CODES_FILE, code_name, get_code
from lmstudy.ctrl.generation import code_prefix, context_length, stream_rows
from lmstudy.ctrl.model import STUDY, load_control_model
from lmstudy.ctrl.sampling import PENALTIES, SamplingConfig
from lmstudy.ctrl.smol_ctrl import DELTA_RECORD, read_delta_record
from lmstudy.paths import REPO_ROOT, models_dir, runs_dir
from lmstudy.pretrained import load_pretrained, resolve_pretrained
from lmstudy.weights_precision import chosen_weights, with_weights

MAX_TEXT_CHARS = 20_000  # a prompt or a text to attribute; longer is refused before tokenising
MAX_CODE_CHARS = 200
MAX_NEW_TOKENS = 256  # the cap; a model with a short context gets at most half its context
MIN_COLUMNS, MAX_COLUMNS = 2, 4
MAX_ATTRIBUTION_CODES = 64
DEFAULT_CHECKPOINT = "ctrl-smollm2"  # SmolLM2-135M + LoRA + code rows (needs the fetched SmolLM2)
FAST_CHECKPOINT = "ctrl-demo"  # the 3M GPT-2: loads in a second, generates ~10x faster
# What the model list says of each kind of control-code model, with its measured speed in the app (4 columns x 128
# new tokens, median; OMP_NUM_THREADS=2 python benchmarks/bench_smollm2.py --parts app --model NAME, written to
# APP_SPEED): "default" for the SmolLM2 model, "fast" for the others.
APP_SPEED = "figures/04_app_speed.csv"
NO_CHECKPOINT = (
    "No model found. The demo checkpoint is `models/ctrl-demo`; to make a small one in a minute, run "
    "`python -m lmstudy study 04_control_codes --scale smoke` (it writes `models/smoke/ctrl-demo`), then "
    "restart the app. Or pass a local checkpoint: `python app.py --model PATH_OR_ID`."
)
# The page's examples, the paper's Table 1 idea: one prompt under several domain codes (greedy, penalty θ = 1.2).
EXAMPLE_SETTINGS = {"decoding": "greedy", "penalty": "ctrl", "theta": 1.2}
EXAMPLES = [
    ("The knife", ["Wikipedia", "Books", "Reviews Rating: 1.0", "r/worldnews"]),
    ("The president said", ["Wikipedia", "News Text:", "r/worldnews", "IRC"]),
    ("This film", ["Reviews Rating: 1.0", "Reviews Rating: 5.0", "Books", "r/television"]),
    ("What is", ["Questions Q:", "Wikipedia", "IRC"]),
]  # (study 04's comparison generates them too: lmstudy.ctrl.compare)
PRIORS = ("uniform", "empirical")
DECODINGS = ("greedy", "sample")
# Invisible characters that belong to ordinary text, not refused as non-printable: the zero-width
# joiner of emoji sequences (a woman technologist is 👩 + U+200D + 💻) and, with the non-joiner, of Indic and Persian
# scripts. The tag characters (U+E0020..U+E007F) are allowed only in a flag's tag sequence (🏴 + tags +
# cancel tag: Scotland's flag); elsewhere they are hidden text, refused.
INVISIBLE_BUT_PRINTABLE = "\u200c\u200d"
EMOJI_TAG_SEQUENCE = re.compile("\U0001F3F4[\U000E0020-\U000E007E]+\U000E007F")
# Markdown's inline punctuation (emphasis, code, links, images, strikethrough, escapes, LaTeX), backslashed
# by markdown_literal after HTML escaping.
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]!~$])")
# What separates the words of a pasted code: tabs, line breaks and every Unicode space separator (category Zs:
# the no-break space U+00A0, the thin and ideographic spaces, ...; Zl, Zp: U+2028, U+2029). parse_code turns each
# run of them into one plain space, so "Reviews<no-break space>Rating: 1.0" is the typed "Reviews Rating: 1.0".
CODE_WHITESPACE = re.compile(
    "[\t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000 ]+")
# Invisible characters a message names in words when it quotes a string (the others: their Unicode names).
CHARACTER_NAMES = {"\t": "tab", "\n": "line break", "\r": "carriage return"}



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
    weights: str = "float32"  # the precision it is served with (lmstudy.weights_precision)

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


def delta_ready(folder: Path) -> bool:
    """Whether a control-code folder can load here: a full checkpoint always; a delta (adapter over a fetched base,
    :mod:`lmstudy.ctrl.smol_ctrl`) when its base is on this machine (``python -m lmstudy models fetch smollm2``)."""
    if not (folder / DELTA_RECORD).is_file():
        return True
    try:
        resolve_pretrained(read_delta_record(folder)["base"]["name"])
    except (FileNotFoundError, OSError, ValueError):
        return False
    return True


def allowed_checkpoints() -> dict[str, Path]:
    """The local checkpoints the page may offer, name -> folder: ``models/ctrl-smollm2`` first when its base is
    fetched, ``models/ctrl-demo`` next (first without the base), then the other ``models/*`` and ``models/*/*``
    folders with ``control_codes.json``, then the control-code runs (``runs/04_control_codes/*/model``), newest
    first."""
    root = models_dir()
    found = sorted(root.glob(f"*/{CODES_FILE}")) + sorted(root.glob(f"*/*/{CODES_FILE}"))
    order = {root / DEFAULT_CHECKPOINT: 0, root / FAST_CHECKPOINT: 1}
    found.sort(key=lambda p: order.get(p.parent, 2) if delta_ready(p.parent) else 3)  # stable within each rank
    runs = sorted((runs_dir() / STUDY).glob(f"*/model/{CODES_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    return {_label(p.parent): p.parent for p in found + runs}


def measured_speed(name: str) -> float | None:
    """The app's measured median seconds for 4 columns x 128 new tokens with checkpoint ``name`` (:data:`APP_SPEED`),
    or None when it was not measured."""
    path = REPO_ROOT / APP_SPEED
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    rows = table[table["model"] == name]
    return float(rows["seconds"].iloc[-1]) if len(rows) else None


def checkpoint_label(name: str, folder: Path) -> str:
    """What the model list shows for a checkpoint: its name, its kind, and its measured speed when known."""
    delta = (Path(folder) / DELTA_RECORD).is_file()
    kind = "SmolLM2-135M + codes, default" if delta else "small GPT-2, fast"
    seconds = measured_speed(name)
    speed = f", 4 x 128 tokens in {seconds:.1f} s here" if seconds is not None else ""
    ready = "" if delta_ready(Path(folder)) else ", needs python -m lmstudy models fetch smollm2"
    return f"{name} ({kind}{speed}{ready})"


def load_served_model(id_or_path: str | Path, name: str | None = None, weights: str = "float32") -> ServedModel:
    """A control-code folder (``control_codes.json``) or any local Hugging Face causal LM, with ``weights``
    precision (:mod:`lmstudy.weights_precision`: float32, bfloat16, or auto)."""
    path = Path(id_or_path).expanduser()
    name = name or str(id_or_path)
    if (path / CODES_FILE).is_file():
        loaded = load_control_model(path)
        model, tokenizer, kind, codes, mixture = loaded.model, loaded.tokenizer, "control", loaded.codes, loaded.mixture
    else:
        model, tokenizer, _ = load_pretrained(str(id_or_path))  # a folder, a fetched model's name or a cached hub id
        kind, mixture = "plain", None
        codes = sorted(getattr(tokenizer, "control_codes", {}) or {})  # suggested: Salesforce/ctrl's own codes
    weights = chosen_weights(model, weights)
    return ServedModel(name, with_weights(model, weights), tokenizer, kind, codes, mixture, weights)


class ModelRegistry:
    """The models the page can name (the allow-list, plus ``--model``) and the ones loaded.

    ``extra``: the ``--model`` argument, offered first. A model is loaded on first use and kept
    (the last ``keep`` used), so each is loaded once per process, with ``weights`` precision (``--weights``)."""

    def __init__(self, extra: str | None = None, keep: int = 2, weights: str = "auto") -> None:
        self.extra = extra
        self.keep = keep
        self.weights = weights
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

    def labelled_choices(self) -> list[tuple[str, str]]:
        """``(label, name)`` per choice for the model list: the label says the kind and measured speed
        (:func:`checkpoint_label`); the name is what the page sends back."""
        return [(checkpoint_label(name, Path(path)) if (Path(path) / CODES_FILE).is_file() else name, name)
                for name, path in self.choices().items()]

    def default(self) -> str | None:
        return next(iter(self.choices()), None)

    def get(self, name) -> ServedModel:
        """The model the page names (loaded on first use), else an :class:`InputError`: no model
        chosen, a name not on the list, or no model at all (then how to get one)."""
        with self._lock:  # one load at a time; a second request for the same model waits for it
            if isinstance(name, str) and name in self._loaded:
                self._loaded.move_to_end(name)
                return self._loaded[name]
            choices = self.choices()
            if not choices:
                raise InputError(NO_CHECKPOINT)
            if not name:
                raise InputError(f"No model chosen: choose one in the Model list ({', '.join(choices)}).")
            if not isinstance(name, str) or name not in choices:
                raise InputError(f"Unknown model {_shown(name)}: choose one of the list ({', '.join(choices)}).")
            served = run_on_model_thread(load_served_model, choices[name], name, self.weights)
            self._loaded[name] = served
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
            return served


# --------------------------------------------------------------------------------------------
# validation: one check per kind of field (text, code, number, choice, flag), for the page and the API alike


def normalize_code_spaces(code: str) -> str:
    """``code`` with each run of tabs, line breaks and Unicode space separators as one plain space, ends stripped
    (:data:`CODE_WHITESPACE`): a code pasted with a no-break space or a tab is the code typed with a space."""
    return CODE_WHITESPACE.sub(" ", code).strip(" ")


def _character(char: str) -> str:
    """One character of a quoted string: itself when it shows, else its name in brackets (``[tab]``,
    ``[no-break space U+00A0]``): spaces other than the plain one, control, format and unassigned characters."""
    category = unicodedata.category(char)
    if char == " " or category[0] not in "CZ":
        return char
    if char in CHARACTER_NAMES:
        return f"[{CHARACTER_NAMES[char]}]"
    described = {"Cc": "control character", "Cs": "surrogate", "Co": "private-use character",
                 "Cn": "unassigned character"}.get(category, "character")
    return f"[{unicodedata.name(char, described).lower()} U+{ord(char):04X}]"


def quoted(text: str) -> str:
    """``text`` in quotes as a message shows it: as typed, with no Python escapes; each invisible character named
    in words (``'Reviews[tab]Rating:'``, ``'a[zero width space U+200B]b'``)."""
    return "'" + "".join(map(_character, text)) + "'"


def _literal(value) -> str:
    """``value`` written out for a message: strings through :func:`quoted`, lists and dicts item by item."""
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, (list, tuple)):
        items = ", ".join(map(_literal, value))
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, (bool, int, type(None))) else quoted(repr(value))


def _shown(value, limit: int = 40) -> str:
    """``value`` as a message quotes it: short (a 20,000-character string or a 400-digit number is cut), with no
    Python escapes (:func:`quoted`)."""
    if isinstance(value, int) and not isinstance(value, bool) and len(str(value)) > 20:
        return f"{str(value)[:12]}... ({len(str(abs(value)))} digits)"
    if isinstance(value, str):
        if len(whole := quoted(value)) <= limit:
            return whole
        cut = value[0]
        for char in value[1:]:  # the longest start that fits, quotes and "..." included (at least one character)
            if len(quoted(cut + char)) + 3 > limit:
                break
            cut += char
        return quoted(cut) + "..."
    text = _literal(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def markdown_literal(text: str) -> str:
    """``text`` as Markdown that shows it as typed: HTML escaped, Markdown's punctuation backslashed
    (a code typed as ``Reviews <b>x</b>`` or ``Reviews *x*`` is shown, not rendered)."""
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=False))


def check_text(text, served: ServedModel | None = None, what: str = "prompt") -> str:
    """The text if a model may read it, else an :class:`InputError` that says why."""
    if text is not None and not isinstance(text, str):
        raise InputError(f"The {what} must be a string, got {_shown(text)}.")
    if text is None or not text.strip():
        verb = "continue" if what == "prompt" else "score"
        raise InputError(f"The {what} is empty: type some text for the model to {verb}.")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"The {what} is {len(text):,} characters long; the limit is {MAX_TEXT_CHARS:,}.")
    in_flags = {i for match in EMOJI_TAG_SEQUENCE.finditer(text) for i in range(match.start(), match.end())}
    for position, char in enumerate(text):
        # Control (Cc, but tab and line breaks), format (Cf), surrogate, private-use and unassigned characters;
        # but the joiners and the tags of a flag, which belong to ordinary text (see INVISIBLE_BUT_PRINTABLE).
        if (unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn") and char not in "\t\n\r"
                and char not in INVISIBLE_BUT_PRINTABLE and position not in in_flags):
            raise InputError(f"The {what} contains a non-printable character (U+{ord(char):04X}) at position "
                             f"{position + 1}: remove it.")
    if served is not None:
        for token in served.special_tokens():
            if token in text:
                hint = " (choose control codes in the code boxes instead)" if served.kind == "control" else ""
                raise InputError(f"The {what} contains {quoted(token)}, one of the model's special tokens: "
                                 f"remove it{hint}.")
    return text


@dataclass(frozen=True)
class Prefix:
    """What comes before the prompt in a row: ids, and the glue between them and the prompt."""

    code: str  # as the page shows it
    ids: list[int]
    glue: str = ""  # "" or " ": put before the prompt when it is tokenised


def parse_code(served: ServedModel, code, column: str = "") -> Prefix:
    """A typed code -> the :class:`Prefix` of its rows (see the module docstring). Tabs, line breaks and Unicode
    spaces (a pasted no-break space) are plain spaces, runs of them one (:func:`normalize_code_spaces`)."""
    where = f" ({column})" if column else ""
    code = "" if code is None else normalize_code_spaces(str(code))
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
        raise InputError(f"Unknown control code {quoted(code_name(name))}{where}; this model knows: "
                         f"{', '.join(served.codes)}.") from error
    try:  # a secondary code: the domain's own form, or another domain's template (code-mixing)
        prefix = code_prefix(served.tokenizer, f"{name} {secondary}", served.codes)
    except ValueError as error:
        raise InputError(f"Malformed control code {quoted(code)}{where}: {error}.") from error
    return Prefix(prefix.code, prefix.ids, prefix.glue)


def _capitalized(name: str) -> str:
    return name[0].upper() + name[1:]


def _number_text(number) -> str:
    return f"{number:,}" if isinstance(number, int) else f"{number:g}"


@dataclass(frozen=True)
class NumberField:
    """A numeric field of the page (or of the API) and the values it takes; :meth:`check` is its one check.

    The page sends a JSON number, or null for an empty box; an API client may also send a string
    holding a number (``"40"``, ``"0.8"``). Whatever arrives, a bad value is an :class:`InputError`
    that names the field: not a number, not finite, a fraction in a whole-number field (10.5 new
    tokens is refused, never rounded), outside the bounds."""

    name: str  # as a message names it: "top-k", "the temperature"
    low: float | None = None
    high: float | None = None
    whole: bool = False
    low_open: bool = False  # ``low`` itself is refused (top-p > 0)
    hint: str = ""  # added to the out-of-bounds message

    def parse(self, value) -> int | float:
        """The number ``value`` holds (bounds not checked), else an :class:`InputError`."""
        if value is None or (isinstance(value, str) and not value.strip()) or (
                isinstance(value, float) and math.isnan(value)):
            raise InputError(f"Give a value for {self.name}.")
        not_a_number = InputError(f"{_capitalized(self.name)} must be a number, got {_shown(value)}.")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise not_a_number
        number = value
        if isinstance(value, str):
            try:
                number = int(value)
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    raise not_a_number from None
        if isinstance(number, float):
            if not math.isfinite(number):
                raise InputError(f"{_capitalized(self.name)} must be a finite number, got {_shown(value)}.")
            if self.whole:
                if not number.is_integer():
                    raise InputError(f"{_capitalized(self.name)} must be a whole number, got {_shown(value)}.")
                number = int(number)
        return number

    def bounds(self) -> str:
        """The values it takes, in words: "between 1 and 16", "at least 0", "greater than 0 and at most 1"."""
        low = None if self.low is None else (
            f"greater than {_number_text(self.low)}" if self.low_open else f"at least {_number_text(self.low)}")
        if self.high is None:
            return low or "any number"
        if low is None:
            return f"at most {_number_text(self.high)}"
        if self.low_open:
            return f"{low} and at most {_number_text(self.high)}"
        return f"between {_number_text(self.low)} and {_number_text(self.high)}"

    def check(self, value) -> int | float:
        """The number ``value`` holds if it is within the bounds, else an :class:`InputError`."""
        number = self.parse(value)
        below = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        above = self.high is not None and number > self.high
        if below or above:
            hint = f" ({self.hint})" if self.hint else ""
            raise InputError(f"{_capitalized(self.name)} must be {self.bounds()}, got {_shown(number)}{hint}.")
        return number


# The page's numeric fields. The bounds of the temperature and θ keep the logits finite (dividing by
# 1e-40 gives inf, and NaN probabilities); a top-k above the vocabulary is the same as off.
COLUMNS = NumberField("the number of columns", MIN_COLUMNS, MAX_COLUMNS, whole=True)
TEMPERATURE = NumberField("the temperature", 0.01, 100.0,
                          hint="sampling divides the logits by it; choose greedy decoding for argmax")
TOP_K = NumberField("top-k", 0, whole=True, hint="0: off")
TOP_P = NumberField("top-p", 0, 1, low_open=True, hint="1: off")
THETA = NumberField("the penalty θ", 0.01, 100.0, hint="the paper's is 1.2")
SEED = NumberField("the seed", 0, 2**63 - 1, whole=True)


def max_new_tokens_field(served: ServedModel) -> NumberField:
    """Max new tokens for ``served``: 1 to its cap (``ServedModel.max_new_tokens``)."""
    context = f"this model's context is {served.context} tokens" if served.context else ""
    return NumberField("max new tokens", 1, served.max_new_tokens, whole=True, hint=context)


def check_choice(value, choices: Sequence[str], name: str) -> str:
    """``value`` if it is one of ``choices`` (a radio button's or a dropdown's), else an :class:`InputError`."""
    if isinstance(value, str) and value in choices:
        return value
    raise InputError(f"{_capitalized(name)} must be one of {', '.join(map(quoted, choices))}; got {_shown(value)}.")


def check_flag(value, name: str) -> bool:
    """``value`` if it is a boolean (a checkbox), else an :class:`InputError`."""
    if isinstance(value, bool):
        return value
    raise InputError(f"{_capitalized(name)} must be true or false, got {_shown(value)}.")


def sampling_config(decoding, temperature, top_k, top_p, penalty, theta) -> SamplingConfig:
    """The page's sampling settings as a :class:`SamplingConfig`. A setting that does not apply (the
    temperature with greedy decoding, θ without a penalty) may be empty, but not something else."""
    greedy = check_choice(decoding, DECODINGS, "decoding") == "greedy"
    penalty = check_choice(penalty, PENALTIES, "the repetition penalty")
    for setting, value, unused in ((TEMPERATURE, temperature, greedy), (THETA, theta, penalty == "none")):
        if unused and value is not None:
            setting.parse(value)
    return SamplingConfig(
        temperature=1.0 if greedy else TEMPERATURE.check(temperature), top_k=TOP_K.check(top_k),
        top_p=TOP_P.check(top_p), greedy=greedy, penalty=penalty,
        theta=1.2 if penalty == "none" else THETA.check(theta),
    )


def check_max_new_tokens(value, served: ServedModel) -> int:
    """The page's max new tokens as an int in 1..``served.max_new_tokens``, else an ``InputError``."""
    return max_new_tokens_field(served).check(value)


def fit_max_new_tokens(value, served: ServedModel, default: int) -> int:
    """The page's max new tokens brought within ``served``'s cap (``default`` when it is not a whole
    number): what the box shows after the model changes or an example is loaded."""
    try:
        count = max_new_tokens_field(served).parse(value)
    except InputError:
        count = default
    return max(1, min(count, served.max_new_tokens))


def check_seed(value) -> int:
    """The page's seed as an int in [0, 2^63), else an ``InputError``."""
    return SEED.check(value)


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
    same_seed = check_flag(same_seed, "same seed")
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
        parts = [f"**{markdown_literal(self.code)}**", f"seed {self.seed}", f"{len(self.token_ids)} tokens"]
        if self.perplexity is not None:
            parts.append(f"perplexity {self.perplexity:.1f}")
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:.0f} tokens/s")
        if self.finished:
            parts.append("done")
        return " · ".join(parts)


# Every computation of the models runs on one thread. Each OS thread that calls into torch gets an OpenMP team of
# its own; once a second team exists, the threads outnumber the cores and libgomp lets every team spin only briefly
# before sleeping (its "throttled" spin), which slows the many small operations of a decoding step for good, on
# every thread. Gradio runs handlers (and each step of a streaming one) on whichever worker thread is free, so the
# app sends the loading, each generation step and each attribution here: SmolLM2's 4 x 128 tokens take 3.0 s
# this way, 4.5-4.8 s once a second thread has computed (2 cores).
_MODEL_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lmstudy-model")


def run_on_model_thread(function, *args):
    """``function(*args)`` run on the one model thread (comment above); its result or its exception."""
    return _MODEL_THREAD.submit(function, *args).result()


def on_model_thread(steps: Iterator):
    """Iterate the generator ``steps`` with each of its steps (and its closing) run on the one model thread."""
    end = object()
    try:
        while (item := run_on_model_thread(next, steps, end)) is not end:
            yield item
    finally:
        run_on_model_thread(steps.close)  # a consumer that stops early (a closed tab) closes it there


def stream_comparison(served: ServedModel, comparison: Comparison) -> Iterator[list[Column]]:
    """The columns after every decoding step (text, perplexity and speed so far); the last has every
    column ``finished``. Decoding is ``generation.stream_rows``: one batch, one KV cache."""
    columns = [Column(prefix.code, seed, comparison.prompt)
               for prefix, seed in zip(comparison.prefixes, comparison.seeds)]
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
    """A comma-separated list (or a list) of codes; all the model's codes when empty for a control model (its
    ``control_codes.json`` list: a pretrained base's tokenizer may hold other ``<|...|>`` tokens, e.g. SmolLM2's
    ``<|im_start|>``)."""
    if isinstance(codes, str):
        codes = codes.split(",")
    elif codes is not None and not isinstance(codes, (list, tuple)):
        raise InputError(f"The codes must be text (comma-separated codes), got {_shown(codes)}.")
    names = [str(c).strip() for c in (codes or []) if str(c).strip()]
    if len(names) > MAX_ATTRIBUTION_CODES:
        raise InputError(f"Attribute to at most {MAX_ATTRIBUTION_CODES} codes, got {len(names)}.")
    if served.kind == "plain":
        if not names:
            raise InputError("Type the codes to compare, comma-separated (this model has no codes of its own: each "
                             "code is scored as a text prefix).")
        return [parse_code(served, name).code for name in names]
    if not names:
        return list(served.codes)
    checked = []
    for name in names:
        prefix = parse_code(served, name)
        if len(prefix.ids) != 1:
            raise InputError(f"Attribution ranks domain codes: write {quoted(prefix.code.split(' ')[0])} without its "
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
    logits = served.model(input_ids=input_ids, attention_mask=mask).logits.float()
    log_probs = torch.log_softmax(logits, -1)  # (K, W, V)
    totals = []
    for k, prefix in enumerate(prefixes):
        start = len(prefix.ids)  # the text's first token is predicted at position start - 1
        targets = torch.tensor(ids, device=device)  # (n,)
        picked = log_probs[k, start - 1 : start - 1 + len(ids)].gather(1, targets.unsqueeze(1))  # (n, 1)
        totals.append(float(picked.sum()))
    return totals, len(ids), total


def attribute_text(served: ServedModel, text, codes=None, prior: str = "uniform") -> tuple[pd.DataFrame, str]:
    """The ranking p(code | text), most likely first (``attribution.attribute``'s columns), and a notice
    (empty, or what was cut, or why the prior changed nothing)."""
    text = check_text(text, served, what="text")
    prior = check_choice(prior, PRIORS, "the prior")
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
    notices = []
    if scored < total:
        notices.append(f"The text is {total} tokens; the model scored its first {scored} (its context is "
                       f"{served.context} tokens).")
    if len(table) == 1:
        notices.append("One code: its probability is 1 whatever the text and the prior.")
    elif prior == "empirical" and table["prior"].max() - table["prior"].min() <= 1e-9:
        notices.append("The training mixture gives these codes equal weights, so the empirical prior is the "
                       "uniform one: the result is the same.")
    return table, " ".join(notices)


__all__ = ["EXAMPLES", "EXAMPLE_SETTINGS", "COLUMNS", "Column", "Comparison", "DECODINGS", "InputError", "MAX_NEW_TOKENS", "ModelRegistry",
           "NO_CHECKPOINT", "NumberField", "PRIORS", "Prefix", "SEED", "ServedModel", "TEMPERATURE", "THETA", "TOP_K",
           "TOP_P", "allowed_checkpoints", "checkpoint_label", "delta_ready", "measured_speed", "attribute_text", "check_choice", "check_flag", "check_max_new_tokens",
           "check_seed", "check_text", "fit_max_new_tokens", "load_served_model", "markdown_literal",
           "max_new_tokens_field", "normalize_code_spaces", "parse_code", "parse_code_list", "prefix_log_likelihoods", "prepare_comparison",
           "quoted", "sampling_config", "stream_comparison"]
