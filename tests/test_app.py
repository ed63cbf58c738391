"""The Gradio app (``app.py`` + ``lmstudy.ctrl.serving``): its endpoints through ``gradio_client``
against the app launched on a free local port, greedy equality with ``generate_codes``, the message
of every bad input, the busy message of a full queue, the checkpoint allow-list and a plain Hugging
Face causal LM behind ``--model``.

The model is the tiny two-domain model of tests/test_control.py (codes Alpha and Beta), so these
tests do not depend on the demo checkpoint."""

from __future__ import annotations

import ast
import contextlib
import html
import json
import re
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch

import app
from lmstudy.ctrl.generation import generate_codes
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.ctrl.serving import (
    NO_CHECKPOINT,
    InputError,
    ModelRegistry,
    ServedModel,
    allowed_checkpoints,
    attribute_text,
    load_served_model,
    parse_code,
    prepare_comparison,
    stream_comparison,
)
from tests.conftest import require_corpus
from tests.test_control import trained  # noqa: F401  (the tiny two-domain model: a shared module fixture)

gradio_client = pytest.importorskip("gradio_client")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(demo):
    """The app on a free local port (a server thread), and a client for it."""
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False)
    try:
        yield gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False, analytics_enabled=False,
                                   download_files=False)
    finally:
        demo.close()


@pytest.fixture(scope="module")
def model_dir(trained, tmp_path_factory):  # noqa: F811
    return trained[3].path / "model"


@pytest.fixture(scope="module")
def client(model_dir, tmp_path_factory):
    """The app with ``--model <tiny model>``; empty models/ and runs/ folders, so the allow-list is empty."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMSTUDY_MODELS", str(tmp_path_factory.mktemp("models")))
        mp.setenv("LMSTUDY_RUNS", str(tmp_path_factory.mktemp("runs")))
        with running(app.build_demo(model=str(model_dir), max_queue=8)) as c:
            yield c


SETTINGS = dict(decoding="greedy", temperature=1.0, top_k=0, top_p=1.0, penalty="none", theta=1.2, max_new_tokens=10,
                seed=0, same_seed=True)


def compare(client, model, prompt="apple", codes=("Alpha", "Beta"), n=None, **overrides):
    settings = {**SETTINGS, **overrides}
    codes = list(codes) + [""] * (4 - len(codes))
    return client.predict(model, prompt, n or len([c for c in codes if c]), *codes, *settings.values(),
                          api_name="/compare")


def test_compare_greedy_equals_generate_codes(client, trained, model_dir):  # noqa: F811
    loaded = trained[0]
    outputs = compare(client, str(model_dir), "apple", ("Alpha", "Beta"), max_new_tokens=12)
    assert len(outputs) == 9  # 4 texts, 4 stats lines, 1 status
    texts, stats, status = outputs[:4], outputs[4:8], outputs[8]
    direct = generate_codes(loaded.model, loaded.tokenizer, "apple", ["Alpha", "Beta"], SamplingConfig(greedy=True),
                            max_new_tokens=12)
    assert texts[:2] == tuple(g.prompt + g.text for g in direct) and texts[2:] == ("", "")
    assert texts[0] != texts[1]  # the codes matter
    for line, code in zip(stats[:2], ("Alpha", "Beta")):
        assert f"**{code}**" in line and "perplexity" in line and "tokens/s" in line and "done" in line
    assert stats[2:] == ("", "") and status == ""
    # The paper's penalty and three columns (a code twice: same seed, same text).
    outputs = compare(client, str(model_dir), "gear", ("Beta", "Alpha", "Beta"), penalty="ctrl", theta=1.2)
    direct = generate_codes(loaded.model, loaded.tokenizer, "gear", ["Beta", "Alpha", "Beta"],
                            SamplingConfig(greedy=True, penalty="ctrl", theta=1.2), max_new_tokens=10)
    assert outputs[:3] == tuple(g.prompt + g.text for g in direct) and outputs[0] == outputs[2]


def test_compare_sampling_seeds(client, trained, model_dir):  # noqa: F811
    loaded = trained[0]
    sampling = SamplingConfig(temperature=0.9, top_k=20, top_p=0.95, penalty="hf", theta=1.3)
    settings = dict(decoding="sample", temperature=0.9, top_k=20, top_p=0.95, penalty="hf", theta=1.3, seed=5)
    same = compare(client, str(model_dir), "apple", ("Alpha", "Alpha"), **settings, same_seed=True)
    assert same[0] == same[1]  # same code, same seed: the same text
    direct = generate_codes(loaded.model, loaded.tokenizer, "apple", ["Alpha", "Alpha"], sampling, 10, seed=5)
    assert same[:2] == tuple(g.prompt + g.text for g in direct)
    apart = compare(client, str(model_dir), "apple", ("Alpha", "Alpha"), **settings, same_seed=False)
    direct = generate_codes(loaded.model, loaded.tokenizer, "apple", ["Alpha", "Alpha"], sampling, 10, seeds=[5, 6])
    assert apart[:2] == tuple(g.prompt + g.text for g in direct) and "seed 6" in apart[5]


def test_compare_streams_column_by_column(model_dir):
    served = load_served_model(model_dir)
    comparison = prepare_comparison(served, "apple", ["Alpha", "Beta"], "greedy", 1.0, 0, 1.0, "none", 1.2, 8, 0)
    states = [[(c.text, len(c.token_ids), c.finished) for c in columns]
              for columns in stream_comparison(served, comparison)]
    lengths = [[n for _, n, _ in state] for state in states]
    assert all(a <= b for first, second in zip(lengths, lengths[1:]) for a, b in zip(first, second))  # grows
    assert len(states) >= max(lengths[-1]) >= 2  # one update per decoding step, not one at the end
    assert all(finished for _, _, finished in states[-1])
    direct = generate_codes(served.model, served.tokenizer, "apple", ["Alpha", "Beta"], SamplingConfig(greedy=True), 8)
    assert [text for text, _, _ in states[-1]] == [g.prompt + g.text for g in direct]


def test_attribute_endpoint(client, model_dir):
    chart, table, notice = client.predict(str(model_dir), "engine piston gear valve bolt.", "", "uniform",
                                          api_name="/attribute")
    assert [row[0] for row in chart["value"]["data"]][0] == "Beta"
    assert table["headers"][:4] == ["rank", "code", "probability", "perplexity"]
    rows = table["data"]
    assert [r[1] for r in rows] == ["Beta", "Alpha"] and rows[0][0] == 1 and rows[0][3] < rows[1][3]
    assert sum(r[2] for r in rows) == pytest.approx(1.0, abs=1e-3) and notice == ""
    _, table, _ = client.predict(str(model_dir), "pear plum.", "Alpha", "empirical", api_name="/attribute")
    assert [r[1] for r in table["data"]] == ["Alpha"] and table["data"][0][5] == 1.0  # prior column
    _, _, notice = client.predict(str(model_dir), "apple banana " * 40, "", "uniform", api_name="/attribute")
    assert "scored its first 31" in notice  # cut to the context (32 positions, code included)
    info, n_columns, *codes, max_new_tokens = client.predict(str(model_dir), 10, api_name="/select_model")
    assert "control-code model" in info and "context 32 tokens" in info and [c["value"] for c in codes] == [
        "Alpha", "Beta", "", ""]
    assert n_columns == 2  # a two-code model shows two columns, none of them empty
    assert max_new_tokens["value"] == 10 and max_new_tokens["label"] == "Max new tokens (≤ 16)"


BAD_COMPARE = [
    (dict(prompt=""), "The prompt is empty"),
    (dict(prompt="   \n "), "The prompt is empty"),
    (dict(prompt="apple\x07 pear"), "non-printable character (U+0007)"),
    (dict(prompt="apple\u200b pear"), "non-printable character (U+200B)"),
    (dict(prompt="apple <|endoftext|> pear"), "'<|endoftext|>', one of the model's special tokens"),
    (dict(prompt="<|Alpha|> apple"), "'<|Alpha|>', one of the model's special tokens"),
    (dict(prompt="x" * 20_001), "the limit is 20,000"),
    (dict(codes=("Alpha", "Gamma")), "Unknown control code 'Gamma' (column 2); this model knows: Alpha, Beta"),
    (dict(codes=("Alpha", "")), "Choose a control code (column 2)"),
    (dict(codes=("<|Alpha", "Beta")), "Unknown control code '<|Alpha' (column 1)"),
    (dict(codes=("Alpha", "Beta\x00")), "non-printable character (U+0000)"),
    (dict(prompt=["apple"]), "The prompt must be a string, got ['apple']"),
    (dict(codes=("Gamma<i>x</i>", "Beta")), "Unknown control code 'Gamma<i>x</i>' (column 1)"),
    (dict(decoding="sample", temperature=0), "The temperature must be between 0.01 and 100, got 0 (sampling divides"),
    (dict(decoding="sample", temperature=-1.0), "The temperature must be between 0.01 and 100, got -1"),
    (dict(decoding="sample", temperature=1e-40), "The temperature must be between 0.01 and 100, got 1e-40"),
    (dict(decoding="sample", temperature="hot"), "The temperature must be a number, got 'hot'"),
    (dict(decoding="greedy", temperature="hot"), "The temperature must be a number, got 'hot'"),  # unused, not junk
    (dict(top_p=0.0), "Top-p must be greater than 0 and at most 1, got 0 (1: off)"),
    (dict(top_p=1.5), "Top-p must be greater than 0 and at most 1, got 1.5"),
    (dict(top_k=-3), "Top-k must be at least 0, got -3 (0: off)"),
    (dict(top_k="abc"), "Top-k must be a number, got 'abc'"),
    (dict(top_k=2.5), "Top-k must be a whole number, got 2.5"),
    (dict(top_k=True), "Top-k must be a number, got True"),
    (dict(top_k=[40]), "Top-k must be a number, got [40]"),
    (dict(top_k=None), "Give a value for top-k"),
    (dict(penalty="ctrl", theta=0.0), "The penalty θ must be between 0.01 and 100, got 0 (the paper's is 1.2)"),
    (dict(penalty="ctrl", theta="inf"), "The penalty θ must be a finite number, got 'inf'"),
    (dict(max_new_tokens=17), "Max new tokens must be between 1 and 16, got 17 (this model's context is 32 tokens)"),
    (dict(max_new_tokens=100_000), "Max new tokens must be between 1 and 16, got 100000"),
    (dict(max_new_tokens=10**400), "Max new tokens must be between 1 and 16, got 100000000000... (401 digits)"),
    (dict(max_new_tokens=0), "Max new tokens must be between 1 and 16"),
    (dict(max_new_tokens=10.5), "Max new tokens must be a whole number, got 10.5"),  # refused, not rounded
    (dict(max_new_tokens="10.5"), "Max new tokens must be a whole number, got '10.5'"),
    (dict(max_new_tokens="1e400"), "Max new tokens must be a finite number, got '1e400'"),
    (dict(max_new_tokens="ten"), "Max new tokens must be a number, got 'ten'"),
    (dict(seed=-1), "The seed must be between 0 and 9,223,372,036,854,775,807, got -1"),
    (dict(seed=2**63), "The seed must be between 0 and 9,223,372,036,854,775,807, got 9223372036854775808"),
    (dict(seed="0.5"), "The seed must be a whole number, got '0.5'"),
    (dict(seed={"a": 1}), "The seed must be a number, got {'a': 1}"),
    (dict(same_seed="yes"), "Same seed must be true or false, got 'yes'"),
    # Values outside a radio button's or a dropdown's choices: a message, not Gradio's refusal and its traceback.
    (dict(decoding="beam"), "Decoding must be one of 'greedy', 'sample'; got 'beam'"),
    (dict(penalty="strong"), "The repetition penalty must be one of 'none', 'ctrl', 'hf'; got 'strong'"),
    (dict(n=7), "The number of columns must be between 2 and 4, got 7"),
    (dict(n="two"), "The number of columns must be a number, got 'two'"),
    (dict(model="/etc"), "Unknown model '/etc': choose one of the list ("),
]


def message_of(error) -> str:
    """An error's message as the page shows it (the app escapes HTML in messages: the page renders them)."""
    return html.unescape(str(error.value))


@pytest.mark.parametrize("bad, message", BAD_COMPARE, ids=[m for _, m in BAD_COMPARE])
def test_every_bad_compare_input_gets_its_message(client, model_dir, bad, message, capfd):
    """Every bad value, of whatever type, in every field: its message, and no traceback in the server's log."""
    bad = dict(bad)
    prompt, codes = bad.pop("prompt", "apple"), bad.pop("codes", ("Alpha", "Beta"))
    model, n = bad.pop("model", str(model_dir)), bad.pop("n", 2)
    capfd.readouterr()
    with pytest.raises(gradio_client.exceptions.AppError) as error:
        compare(client, model, prompt, codes, n=n, **bad)
    assert message in message_of(error)
    log = capfd.readouterr()
    assert "Traceback" not in str(error.value) and "Traceback" not in log.out + log.err


def test_long_prompt_is_cut_with_a_notice_and_paths_from_the_browser_are_refused(client, model_dir):
    outputs = compare(client, str(model_dir), "apple banana cherry " * 20, ("Alpha", "Beta"), max_new_tokens=10)
    assert "the model read only its last 21" in outputs[8]  # 32 = code 1 + prompt 21 + 10 new tokens
    assert outputs[0].startswith("apple banana cherry " * 20)
    for model in ("/etc", str(model_dir.parent)):  # not on the list: never opened
        with pytest.raises(gradio_client.exceptions.AppError, match="Unknown model"):
            compare(client, model)
    with pytest.raises(gradio_client.exceptions.AppError, match="The text is empty"):
        client.predict(str(model_dir), " ", "", "uniform", api_name="/attribute")
    with pytest.raises(gradio_client.exceptions.AppError, match="Unknown control code 'Gamma'"):
        client.predict(str(model_dir), "apple", "Alpha, Gamma", "uniform", api_name="/attribute")


# --------------------------------------------------------------------------------------------
# what a new user ran into (issue 22): numbers as strings, the API schema, escaping, emoji, no model
# chosen, the empirical prior; then, with two models, switching models, the examples and the chart


def test_numbers_may_come_as_strings(client, model_dir):
    """A string holding a number is that number, in every numeric field (an API client sends what it has)."""
    as_numbers = compare(client, str(model_dir), "apple", ("Alpha", "Beta"), max_new_tokens=6)
    as_strings = compare(client, str(model_dir), "apple", ("Alpha", "Beta"), n="2", top_k="0", top_p="1",
                         theta="1.2", max_new_tokens=" 6 ", seed="0")
    assert as_strings[:4] == as_numbers[:4] and "6 tokens" in as_strings[4]
    assert compare(client, str(model_dir), "apple", ("Alpha", "Beta"), max_new_tokens=6.0)[:4] == as_numbers[:4]
    # A huge top-k is a valid one (larger than the vocabulary: off), written as a number or as a string.
    for huge in (10**30, 1e30, "1e30"):
        assert compare(client, str(model_dir), "apple", ("Alpha", "Beta"), top_k=huge, max_new_tokens=6)[:4] == (
            as_numbers[:4])
    sampled = [compare(client, str(model_dir), "apple", ("Alpha", "Beta"), decoding="sample", temperature=t, top_k=k,
                       seed=seed, max_new_tokens=6) for t, k, seed in ((0.9, 5, 3), ("0.9", "5", "3"))]
    assert sampled[0][:4] == sampled[1][:4] and "seed 3" in sampled[1][4]


def test_every_value_the_api_schema_lists_is_accepted(client, model_dir):
    """The documented schema (``view_api``) lists the columns as the strings '2', '3', '4': they pass, as do
    the integers; so does every listed value of every other field."""
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/compare"]["parameters"]
    base = [str(model_dir), "apple", 2, "Alpha", "Beta", "", "", *SETTINGS.values()]
    assert [p["parameter_name"] for p in parameters] == ["model_name", "prompt", "n_columns", "code_1", "code_2", "code_3",
                                                         "code_4", *SETTINGS]
    listed = {k: ast.literal_eval(p["python_type"]["type"].removeprefix("Literal[").removesuffix("]") + ",")
              for k, p in enumerate(parameters) if p["python_type"]["type"].startswith("Literal[")}
    names = [p["parameter_name"] for p in parameters]
    assert listed[names.index("n_columns")] == ("2", "3", "4") and listed[names.index("decoding")] == (
        "greedy", "sample")
    for k, values in listed.items():
        for value in values:
            args = list(base)
            args[k] = value
            if k == 2:  # n columns: as many codes
                args[3:7] = (["Alpha", "Beta"] * 2)[:int(value)] + [""] * (4 - int(value))
            outputs = client.predict(*args, api_name="/compare")
            assert len(outputs) == 9 and outputs[0].startswith("apple"), (parameters[k]["parameter_name"], value)
    assert client.predict(*base[:2], 3, "Alpha", "Beta", "Alpha", "", *SETTINGS.values(), api_name="/compare")[2]


def test_html_in_a_code_is_shown_not_rendered(client, model_dir):
    """A composite code's free text is shown in the column's stats line as typed: HTML escaped, Markdown
    punctuation backslashed. Messages (rendered as HTML by the page) escape what was typed too."""
    outputs = compare(client, str(model_dir), "apple", ("Alpha <b>bold</b> *x*", "Beta"), max_new_tokens=4)
    assert outputs[0].startswith("apple")
    assert outputs[4].startswith(r"**Alpha &lt;b&gt;bold&lt;/b&gt; \*x\*** · seed 0") and "<" not in outputs[4]
    with pytest.raises(gradio_client.exceptions.AppError) as error:
        compare(client, str(model_dir), "apple", ("Gamma<b>x</b>", "Beta"))
    assert "'Gamma&lt;b&gt;x&lt;/b&gt;'" in str(error.value) and "<b>" not in str(error.value)


EMOJI_AND_JOINERS = [
    "apple 👩\u200d💻 pear",  # a woman technologist: woman, zero-width joiner, laptop
    "apple 👨\u200d👩\u200d👧 pear",  # a family
    "flag 🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",  # Scotland: black flag + tags + cancel tag
    "नमस्\u200dते",  # a joiner in Devanagari
    "می\u200cخواهم",  # a non-joiner in Persian
]


@pytest.mark.parametrize("prompt", EMOJI_AND_JOINERS)
def test_emoji_and_joiners_are_printable(client, model_dir, prompt):
    outputs = compare(client, str(model_dir), prompt, max_new_tokens=4)
    assert outputs[0].startswith(prompt) and outputs[1].startswith(prompt)


@pytest.mark.parametrize("prompt, character", [("apple \U000E0041 pear", "U+E0041"), ("🏴\U000E0067 pear", "U+E0067"),
                                               ("apple\u200b", "U+200B"), ("a\u202eb", "U+202E")])
def test_hidden_characters_are_still_refused(client, model_dir, prompt, character):
    """Tag characters outside a flag (hidden text), zero-width spaces, bidirectional overrides."""
    with pytest.raises(gradio_client.exceptions.AppError, match=re.escape(f"non-printable character ({character})")):
        compare(client, str(model_dir), prompt)


# --------------------------------------------------------------------------------------------
# issue 48, as a hostile client: codes pasted with other spaces, messages without Python escapes, raw queue requests


def test_codes_pasted_with_other_spaces_work_as_typed(client, model_dir, capfd):
    """A no-break space, a tab or an em space in a code (a code pasted from a document) is a plain space, a run of
    them one space, at the ends none: the columns, their stats lines and the attribution are the typed code's."""
    typed = compare(client, str(model_dir), "apple", ("Alpha x y", "Beta"), max_new_tokens=6)
    pasted = compare(client, str(model_dir), "apple", ("\u00a0Alpha\u00a0x\t \u2003y\t", "\tBeta\u3000"),
                     max_new_tokens=6)
    assert pasted[:4] == typed[:4] and pasted[0] != pasted[1]
    assert pasted[4].startswith("**Alpha x y** · seed 0 · 6 tokens") and pasted[5].startswith("**Beta** · seed 0")
    text = "engine piston gear valve bolt."
    _, plain, _ = client.predict(str(model_dir), text, "Alpha, Beta", "uniform", api_name="/attribute")
    _, spaced, _ = client.predict(str(model_dir), text, "Alpha\u00a0,\tBeta\u202f", "uniform", api_name="/attribute")
    assert spaced["data"] == plain["data"] and [row[1] for row in spaced["data"]] == ["Beta", "Alpha"]
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err


@pytest.mark.parametrize("space", ["\u00a0", "\t", "\u2003", "\u3000", "\u202f", " \t\u00a0 "])
def test_a_pasted_space_in_a_composite_code_is_a_plain_space(study_codes_model, space):
    typed = parse_code(study_codes_model, "Reviews Rating: 1.0")
    assert parse_code(study_codes_model, f"{space}Reviews{space}Rating:{space}1.0{space}") == typed
    assert typed.code == "Reviews Rating: 1.0"


READABLE_MESSAGES = [  # what is left after the spaces are normalised: shown in quotes, invisible characters named
    (dict(codes=("Gam\u200dma", "Beta")), "Unknown control code 'Gam[zero width joiner U+200D]ma' (column 1)"),
    (dict(codes=("Alpha", "Gam\u00a0ma")), "Unknown control code 'Gam' (column 2)"),
    (dict(codes=("Alpha", "Gamma\nx")), "Unknown control code 'Gamma' (column 2)"),
    (dict(model="/etc\u00a0x"), "Unknown model '/etc[no-break space U+00A0]x': choose one of the list"),
    (dict(decoding="greedy\t"), "Decoding must be one of 'greedy', 'sample'; got 'greedy[tab]'"),
    (dict(seed="1\n2"), "The seed must be a number, got '1[line break]2'"),
    (dict(top_k="\x1b[31m"), "Top-k must be a number, got '[control character U+001B][31m'"),
    (dict(prompt=["a\u00a0b"]), "The prompt must be a string, got ['a[no-break space U+00A0]b']"),
    (dict(max_new_tokens="ten\u00a0" * 20), "Max new tokens must be a number, got 'ten[no-break space U+00A0]ten'..."),
]


@pytest.mark.parametrize("bad, message", READABLE_MESSAGES, ids=[m for _, m in READABLE_MESSAGES])
def test_messages_show_what_was_sent_without_python_escapes(client, model_dir, bad, message, capfd):
    bad = dict(bad)
    prompt, codes = bad.pop("prompt", "apple"), bad.pop("codes", ("Alpha", "Beta"))
    model = bad.pop("model", str(model_dir))
    capfd.readouterr()
    with pytest.raises(gradio_client.exceptions.AppError) as error:
        compare(client, model, prompt, codes, n=2, **bad)
    shown = message_of(error)
    assert message in shown
    assert "\\" not in shown and "\u00a0" not in shown and "\t" not in shown  # no escapes, no raw invisible space
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err


def test_raw_queue_requests_naming_no_function_or_too_few_inputs(client, model_dir, capfd):
    """A client posting to Gradio's routes itself, with a function index the page does not have or fewer values
    than the function's inputs: a message naming what is wrong, and no traceback in the server's log."""
    import httpx

    api = client.src.rstrip("/") + "/gradio_api"
    compare_index = next(d["id"] for d in client.config["dependencies"] if d.get("api_name") == "compare")
    capfd.readouterr()
    cases = [
        ("/queue/join", dict(data=[], fn_index=999, session_hash="h48a"), 404,
         "Unknown function index (fn_index) 999: this app's functions are numbered 0 to "),
        ("/queue/join", dict(data=[], fn_index="999", session_hash="h48b"), 404, "Unknown function index (fn_index) 999"),
        ("/queue/join", dict(data=[], fn_index=-1, session_hash="h48c"), 404, "Unknown function index (fn_index) -1"),
        ("/queue/join", dict(data=[str(model_dir)], fn_index=compare_index, session_hash="h48d"), 422,
         f"The endpoint /compare (fn_index {compare_index}) takes 16 input values (Model, Prompt, Columns, "),
        ("/run/compare", dict(data=[str(model_dir), "apple"]), 422, "takes 16 input values"),
        ("/call/compare", dict(data=[str(model_dir)]), 422, "the request sent 1."),
        ("/api/predict", dict(data=[], fn_index=999), 404, "Unknown function index (fn_index) 999"),
        ("/run/nope", dict(data=[]), 404, "Unknown endpoint '/nope': this app's endpoints are /compare, /attribute"),
        ("/call/v2/nope", dict(), 404, "Unknown endpoint '/nope'"),
    ]
    for route, body, status, message in cases:
        answer = httpx.post(api + route, json=body, timeout=30)
        assert (answer.status_code, route) == (status, route) and message in answer.json()["detail"], answer.text
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err and "KeyError" not in log.out + log.err
    # A whole request still goes through (the check hands Gradio the body it read).
    assert compare(client, str(model_dir), "apple", max_new_tokens=4)[0].startswith("apple")


def test_no_model_chosen_names_the_models(client, model_dir, capfd):
    """An empty model box, while models exist: choose one of them (not "No model found ... restart")."""
    calls = [lambda model: compare(client, model),
             lambda model: client.predict(model, "apple", "", "uniform", api_name="/attribute"),
             lambda model: client.predict(model, 10, api_name="/select_model")]
    for call in calls:
        for empty in ("", None):
            with pytest.raises(gradio_client.exceptions.AppError) as error:
                call(empty)
            assert f"No model chosen: choose one in the Model list ({model_dir})" in message_of(error)
            assert "No model found" not in message_of(error)
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err


def test_empirical_prior_says_when_it_is_the_uniform_one(client, model_dir, capfd):
    """The tiny model was trained on a uniform mixture: the empirical prior changes nothing, and says so."""
    text = "engine piston gear valve bolt."
    _, uniform, notice = client.predict(str(model_dir), text, "", "uniform", api_name="/attribute")
    assert notice == ""
    _, empirical, notice = client.predict(str(model_dir), text, "", "empirical", api_name="/attribute")
    assert "the empirical prior is the uniform one: the result is the same" in notice
    assert empirical["data"] == uniform["data"] and [row[5] for row in empirical["data"]] == [0.5, 0.5]
    _, _, notice = client.predict(str(model_dir), text, "Beta", "uniform", api_name="/attribute")
    assert notice == "One code: its probability is 1 whatever the text and the prior."
    with pytest.raises(gradio_client.exceptions.AppError) as error:
        client.predict(str(model_dir), text, "", "bayes", api_name="/attribute")
    assert "The prior must be one of 'uniform', 'empirical'; got 'bayes'" in message_of(error)
    for codes in (5, {"Alpha": 1}):
        with pytest.raises(gradio_client.exceptions.AppError) as error:
            client.predict(str(model_dir), text, codes, "uniform", api_name="/attribute")
        assert f"The codes must be text (comma-separated codes), got {codes!r}" in message_of(error)
    with pytest.raises(gradio_client.exceptions.AppError) as error:
        client.predict(str(model_dir), 42, "", "uniform", api_name="/attribute")
    assert "The text must be a string, got 42" in message_of(error)
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err


@pytest.fixture(scope="module")
def two_models(trained, model_dir, tmp_path_factory):  # noqa: F811
    """Two models with different contexts, outside any app: ``plain``, a plain causal LM (GPT-2 with the
    tiny model's tokenizer, random weights, context 64: max new tokens up to 32, every example offered)
    and ``models/skewed``, the tiny control-code model (context 32: up to 16) with a 0.8 / 0.2 mixture."""
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("two-models")
    skewed = _fake_checkpoint(root / "models" / "skewed", model_dir)
    (skewed / "control_codes.json").write_text(json.dumps({"codes": ["Alpha", "Beta"],
                                                           "mixture": {"Alpha": 0.8, "Beta": 0.2}}))
    tokenizer = trained[0].tokenizer
    torch.manual_seed(0)
    plain = root / "plain"
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                               eos_token_id=tokenizer.eos_token_id)).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    return root, plain, skewed


@pytest.fixture
def two_model_app(two_models, monkeypatch):
    """The app with ``--model plain`` and ``skewed`` on its allow-list."""
    root, plain, skewed = two_models
    monkeypatch.setenv("LMSTUDY_MODELS", str(root / "models"))
    monkeypatch.setenv("LMSTUDY_RUNS", str(root / "runs"))
    with running(app.build_demo(model=str(plain))) as c:
        yield c, str(plain), str(skewed)


def test_switching_models_updates_max_new_tokens_and_examples_fit(two_model_app, capfd):
    c, plain, skewed = two_model_app
    *_, tokens = c.predict(plain, 40, api_name="/select_model")
    assert tokens == {"__type__": "update", "label": "Max new tokens (≤ 32)", "value": 32}
    *_, tokens = c.predict(skewed, 32, api_name="/select_model")  # a shorter context: the limit and its label follow
    assert tokens == {"__type__": "update", "label": "Max new tokens (≤ 16)", "value": 16}
    *_, tokens = c.predict(plain, 12, api_name="/select_model")  # a value within the limit stays
    assert tokens == {"__type__": "update", "label": "Max new tokens (≤ 32)", "value": 12}
    *_, tokens = c.predict(plain, "junk", api_name="/select_model")  # not a number: the default, within the limit
    assert tokens["value"] == 32
    # An example (what its button fills in before it generates) brings max new tokens within the model's limit,
    # and says what it changed in the collapsed Sampling panel; its settings then generate.
    filled = c.predict(plain, 100, api_name="/example_1")
    prompt, n, *codes, decoding, penalty, theta, tokens, notice = filled
    assert (prompt, n, codes, decoding, penalty, theta, tokens) == (
        app.EXAMPLES[0][0], 4, app.EXAMPLES[0][1], "greedy", "ctrl", 1.2, 32)
    assert notice == ("**The example changed the sampling settings** (opened above): greedy decoding, the paper's "
                      "repetition penalty (ctrl, θ = 1.2), max new tokens 32.")
    outputs = c.predict(plain, prompt, n, *codes, decoding, 0.8, 40, 1.0, penalty, theta, tokens, 0, True,
                        api_name="/compare")
    assert all(text.startswith(prompt) for text in outputs[:4]) and all("done" in line for line in outputs[4:8])
    with pytest.raises(gradio_client.exceptions.AppError, match="This example's codes .* are not all codes of"):
        c.predict(skewed, 16, api_name="/example_1")  # (its button is hidden for this model)
    log = capfd.readouterr()
    assert "Traceback" not in log.out + log.err


def test_chart_labels_stand_upright_for_many_codes_and_a_skewed_prior_is_used(two_model_app):
    c, plain, skewed = two_model_app
    codes = ", ".join(f"code {k}:" for k in range(20))
    chart, table, _ = c.predict(plain, "A film.", codes, "uniform", api_name="/attribute")
    assert len(chart["value"]["data"]) == len(table["data"]) == 20 and chart["x_label_angle"] == -90
    chart, _, _ = c.predict(plain, "A film.", "code 1:, code 2:", "uniform", api_name="/attribute")
    assert chart["x_label_angle"] == 0
    _, table, notice = c.predict(skewed, "apple pear.", "", "empirical", api_name="/attribute")
    assert {row[1]: row[5] for row in table["data"]} == {"Alpha": 0.8, "Beta": 0.2} and notice == ""


# --------------------------------------------------------------------------------------------
# codes of the study's domains (composite codes), without a model


@pytest.fixture(scope="module")
def study_codes_model():
    """A ServedModel whose tokenizer has some of the study's codes (no network: only parse_code is used)."""
    from lmstudy.ctrl.codes import code_token
    from lmstudy.tokenization import END_OF_TEXT, train_bpe

    names = ["Wikipedia", "Reviews", "Questions", "News"]
    tokenizer = train_bpe(["Rating: 5.0 a film. Q: who? Title: x Text: y"] * 5, 300,
                          special_tokens=[END_OF_TEXT, *map(code_token, names)])
    return ServedModel("study", None, tokenizer, "control", names, {n: 0.25 for n in names})


@pytest.mark.parametrize("code, glue, secondary", [
    ("Reviews", "", ""), ("<|Reviews|>", "", ""), ("Reviews Rating: 1.0", "", "Rating: 1.0\n"),
    ("Reviews  Rating: 5.0 ", "", "Rating: 5.0\n"), ("Questions Q:", " ", "Q:"), ("News Text:", " ", "Text:"),
    ("News Title: Markets fall", "", "Title: Markets fall\n"),
    # code-mixing (the paper's Table 5): a domain code with another domain's template
    ("Wikipedia English:", " ", "English:"), ("Reviews Q:", " ", "Q:"), ("Wikipedia Rating: 1.0", "", "Rating: 1.0\n"),
])
def test_composite_codes(study_codes_model, code, glue, secondary):
    tok = study_codes_model.tokenizer
    prefix = parse_code(study_codes_model, code)
    assert prefix.ids[0] == tok.convert_tokens_to_ids(f"<|{code.split()[0].strip('<|>')}|>")
    assert prefix.glue == glue and tok.decode(prefix.ids[1:]) == secondary


@pytest.mark.parametrize("code, message", [
    ("Reviews Rating: 7.0", "after Reviews write `Rating: 1.0` to `Rating: 5.0`"),
    ("Reviews Rating: 1", "Malformed control code 'Reviews Rating: 1'"),
    ("Reviews Stars: 5", "Malformed control code"),
    ("Wikipedia Stars: 5", "Wikipedia takes no secondary code of its own; to mix codes write another domain's"),
    ("Questions What?", "after Questions write `Q:`"),
    ("Books", "Unknown control code 'Books'; this model knows: Wikipedia, Reviews, Questions, News"),
    ("reviews", "Unknown control code 'reviews'"),
])
def test_malformed_codes(study_codes_model, code, message):
    with pytest.raises(InputError) as error:
        parse_code(study_codes_model, code)
    assert message in str(error.value)


# --------------------------------------------------------------------------------------------
# the allow-list, no checkpoint at all, the command line


def _fake_checkpoint(folder: Path, source: Path) -> Path:
    shutil.copytree(source, folder)
    return folder


def test_allow_list(model_dir, tmp_path, monkeypatch):
    models, runs = tmp_path / "models", tmp_path / "runs"
    monkeypatch.setenv("LMSTUDY_MODELS", str(models))
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs))
    _fake_checkpoint(models / "aaa", model_dir)
    _fake_checkpoint(models / "ctrl-demo", model_dir)
    _fake_checkpoint(models / "smoke" / "ctrl-demo", model_dir)
    _fake_checkpoint(runs / "04_control_codes" / "0123abcd" / "model", model_dir)
    (models / "notes").mkdir()  # no control_codes.json: not a checkpoint
    (models / "notes" / "config.json").write_text(json.dumps({}))
    _fake_checkpoint(models / "a" / "b" / "c", model_dir)  # too deep
    found = allowed_checkpoints()
    assert [path.relative_to(tmp_path).as_posix() for path in found.values()] == [
        "models/ctrl-demo", "models/aaa", "models/smoke/ctrl-demo", "runs/04_control_codes/0123abcd/model"]
    registry = ModelRegistry()
    assert registry.default() == str(models / "ctrl-demo")  # outside the repository: the full path
    assert registry.get(registry.default()).codes == ["Alpha", "Beta"]
    with pytest.raises(InputError, match="Unknown model"):
        registry.get(str(models / "a" / "b" / "c"))
    assert registry.get(registry.default()) is registry.get(registry.default())  # loaded once
    # --model naming a listed folder: offered first, under its list name.
    choices = ModelRegistry(extra=f"{models}/smoke/../smoke/ctrl-demo/").choices()
    assert list(choices)[:2] == [str(models / "smoke" / "ctrl-demo"), str(models / "ctrl-demo")] and len(choices) == 4
    # A SmolLM2 delta comes first when its base is fetched, last when it is not (and its label says how to fetch it).
    _fake_checkpoint(models / "ctrl-smollm2", model_dir)
    (models / "ctrl-smollm2" / "smol_ctrl.json").write_text(json.dumps({"base": {"name": "no-such-base"}}))
    assert list(allowed_checkpoints())[0] == str(models / "ctrl-demo")
    assert list(allowed_checkpoints())[-2] == str(models / "ctrl-smollm2")  # (the run cache's entry stays last)
    labels = dict((name, label) for label, name in ModelRegistry().labelled_choices())
    assert "needs python -m lmstudy models fetch smollm2" in labels[str(models / "ctrl-smollm2")]
    assert labels[str(models / "ctrl-demo")].startswith(f"{models / 'ctrl-demo'} (small GPT-2, fast")
    (models / "ctrl-smollm2" / "smol_ctrl.json").write_text(json.dumps({"base": {"name": str(model_dir)}}))
    assert list(allowed_checkpoints())[0] == str(models / "ctrl-smollm2")  # a base that is here: the default


def test_no_checkpoint_page_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    demo = app.build_demo()
    markdown = [block.value for block in demo.blocks.values() if block.__class__.__name__ == "Markdown"]
    assert any("python -m lmstudy study 04_control_codes --scale smoke" in str(text) for text in markdown)
    with running(demo) as c, pytest.raises(gradio_client.exceptions.AppError, match="No model found"):
        c.predict(None, "apple", 2, "", "", "", "", *SETTINGS.values(), api_name="/compare")
    assert "No model found" in NO_CHECKPOINT


def test_main_listens_on_localhost_by_default(model_dir, monkeypatch):
    calls = []
    monkeypatch.setattr(app.gr.Blocks, "launch", lambda self, **kwargs: calls.append((self, kwargs)))
    app.main(["--model", str(model_dir), "--max-queue", "3"])
    demo, kwargs = calls[-1]
    assert kwargs["server_name"] == "127.0.0.1" and kwargs["server_port"] == 7860 and kwargs["share"] is False
    assert demo._queue.max_size == 3
    app.main(["--model", str(model_dir), "--host", "0.0.0.0", "--port", "8123", "--share"])
    launched = dict(calls[-1][1])
    middleware = launched.pop("app_kwargs")["middleware"]  # every launch checks raw API requests first (issue 48)
    assert launched == {"server_name": "0.0.0.0", "server_port": 8123, "share": True, "ssr_mode": False}
    assert [m.cls for m in middleware] == [app.RequestCheck] and middleware[0].kwargs["blocks"] is calls[-1][0]
    with pytest.raises(SystemExit):
        app.main(["--model", str(model_dir.parent / "nope")])


# --------------------------------------------------------------------------------------------
# --model with a plain Hugging Face causal LM


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    require_corpus("gpt2_bpe")
    from transformers import GPT2Config, GPT2LMHeadModel

    from lmstudy.tokenization import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    path = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_plain_causal_lm_codes_are_text_prefixes(plain_dir):
    served = load_served_model(plain_dir)
    assert served.kind == "plain" and served.mixture is None and served.max_new_tokens == 32
    tok = served.tokenizer
    comparison = prepare_comparison(served, "The film", ["Reviews:", ""], "greedy", 1.0, 0, 1.0, "none", 1.2, 6, 0)
    assert comparison.rows == [tok("Reviews:")["input_ids"] + tok(" The film")["input_ids"], tok("The film")["input_ids"]]
    columns = list(stream_comparison(served, comparison))[-1]
    for column, row in zip(columns, comparison.rows):
        prompt = torch.tensor([row])
        hf = served.model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=6,
                                   min_new_tokens=6, pad_token_id=tok.eos_token_id)
        assert column.token_ids == hf[0, len(row):].tolist() and column.text == "The film" + tok.decode(column.token_ids)
    table, notice = attribute_text(served, "A great film.", "Reviews:, Wikipedia:", "uniform")
    assert sorted(table["code"]) == ["Reviews:", "Wikipedia:"] and table["probability"].sum() == pytest.approx(1.0)
    assert notice == "" and (table["tokens"] == len(tok(" A great film.")["input_ids"])).all()
    with pytest.raises(InputError, match="no training mixture"):
        attribute_text(served, "A great film.", "Reviews:", "empirical")
    with pytest.raises(InputError, match="Type the codes to compare"):
        attribute_text(served, "A great film.", "", "uniform")
    with pytest.raises(InputError, match="'<|endoftext|>', one of the model's special tokens"):
        prepare_comparison(served, "a <|endoftext|>", ["x", "y"], "greedy", 1.0, 0, 1.0, "none", 1.2, 6, 0)


def test_plain_causal_lm_through_the_app(plain_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    with running(app.build_demo(model=str(plain_dir))) as c:
        outputs = c.predict(str(plain_dir), "The film", 2, "Reviews:", "Books:", "", "", *SETTINGS.values(),
                            api_name="/compare")
        assert len(outputs) == 9 and all(text.startswith("The film") for text in outputs[:2])
        chart, table, notice = c.predict(str(plain_dir), "A film.", "Reviews:, Books:", "uniform",
                                         api_name="/attribute")
        assert len(table["data"]) == 2


def test_a_full_queue_says_busy(model_dir, tmp_path, monkeypatch):
    """max_queue=1: one request runs (held until released), one waits, the next is told to try again."""
    import threading

    from lmstudy.ctrl import serving

    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    release, started = threading.Event(), threading.Event()

    def held(*args, **kwargs):
        started.set()
        release.wait(timeout=60)
        yield from real(*args, **kwargs)

    real = serving.stream_rows
    monkeypatch.setattr(serving, "stream_rows", held)
    with running(app.build_demo(model=str(model_dir), max_queue=1)) as c:
        args = (str(model_dir), "apple", 2, "Alpha", "Beta", "", "", *SETTINGS.values())
        running_job = c.submit(*args, api_name="/compare")
        assert started.wait(timeout=30)
        waiting_job = c.submit(*args, api_name="/compare")
        deadline = time.monotonic() + 30
        while waiting_job.status().code.name != "IN_QUEUE" and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(gradio_client.utils.QueueError, match="Queue is full! Please try again."):
            c.predict(*args, api_name="/compare")
        release.set()
        assert len(running_job.result(timeout=60)) == 9 and len(waiting_job.result(timeout=60)) == 9
