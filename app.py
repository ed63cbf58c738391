"""lmstudy in the browser: control codes side by side.

    python app.py                         # http://127.0.0.1:7860, the bundled demo checkpoint
    python app.py --port 8000 --max-queue 32
    python app.py --model smollm2         # any local Hugging Face causal LM; codes become text prefixes
    python app.py --model smollm2 --weights float32   # full precision (default auto: bfloat16 for big models)
    python app.py --host 0.0.0.0          # listen on every interface (default: this machine only)
    python app.py --share                 # also ask Gradio for a public share link

Tabs:
- **Compare**: one prompt, 2 to 4 columns, each with its own control code (pick one of the model's
  codes or type a composite one such as ``Reviews Rating: 1.0``), shared sampling settings; all
  columns are generated in one batch and stream in as they grow, with each column's perplexity and
  tokens/second. "Same seed" gives every column the same seed (reproducible, and the columns differ
  only by their codes). The example buttons run the paper's Table 1 idea: one prompt, several codes
  (greedy, penalty θ = 1.2: an example opens the Sampling panel and says what it changed). Choosing a
  model updates the codes, the max-new-tokens limit and the examples offered.
- **Attribute**: paste a text, get p(code | text) as a bar chart with per-code perplexities, under a
  uniform or the training mixture's (empirical) prior.

The model selector offers the allow-listed local checkpoints (``models/ctrl-demo`` first, other
``models/`` folders, control-code runs) and the ``--model`` argument, never a path from the browser.
Everything the page does is in ``lmstudy.ctrl.serving``; this file is the page and the command
line. ``build_demo()`` returns the ``gr.Blocks`` (queue configured); only ``main()`` launches it.
A raw API request that names no function of the page or sends fewer values than its inputs is answered
before Gradio sees it (:class:`RequestCheck`, installed by :class:`CheckedBlocks` on every launch).
"""

from __future__ import annotations

import argparse
import functools
import html
import inspect
import json
import re
import time

import gradio as gr
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

from lmstudy.ctrl.sampling import PENALTIES
from lmstudy.ctrl.serving import (
    COLUMNS,
    DECODINGS,
    EXAMPLE_SETTINGS,
    EXAMPLES,
    MAX_COLUMNS,
    MAX_NEW_TOKENS,
    MIN_COLUMNS,
    NO_CHECKPOINT,
    PRIORS,
    InputError,
    ModelRegistry,
    ServedModel,
    attribute_text,
    fit_max_new_tokens,
    on_model_thread,
    prepare_comparison,
    quoted,
    run_on_model_thread,
    stream_comparison,
)
from lmstudy.training import count_parameters
from lmstudy.weights_precision import WEIGHTS

STREAM_INTERVAL = 0.1  # seconds between two updates of the page while generating
DEFAULT_MAX_QUEUE = 16
DEFAULT_NEW_TOKENS = 40  # the max new tokens box at start (lowered to the model's cap)
LEVEL_LABELS = 6  # the attribution chart writes up to this many code labels level; more stand upright

DEFAULT_CODES = ["Wikipedia", "Books", "Reviews", "r/worldnews"]


# The routes whose JSON body names a function (fn_index) or whose path names an endpoint, and sends its inputs:
# the queue (the page's own route), the direct call (/run/NAME, /api/NAME) and the two-step /call/NAME.
API_REQUEST = re.compile(r"/gradio_api/(?:(queue/join)|(?:run|api|call(?:/v2)?)/([^/]+))/?$")


class RequestCheck:
    """ASGI middleware on the app's server: a raw API request (a client posting to Gradio's routes itself) whose
    ``fn_index`` or endpoint names no function of the page, or whose ``data`` has fewer values than the function's
    inputs, is answered at once (404 or 422, ``{"detail": message}``: what is wrong, what the page has) instead of
    reaching Gradio, which would look it up anyway and leave a traceback in the server's log (a ``KeyError``, or its
    "didn't receive enough input values"). Anything else goes on to Gradio unchanged: a malformed body is for
    Gradio's own (pydantic) checks, which answer it without a traceback."""

    def __init__(self, app, blocks: gr.Blocks) -> None:
        self.app = app
        self.blocks = blocks

    async def __call__(self, scope, receive, send):
        match = (scope["type"] == "http" and scope.get("method") == "POST"
                 and API_REQUEST.search(scope.get("path", "")))
        if not match:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending its request
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        route = match.group(0)
        problem = self.problem(body, endpoint=match.group(2), simple=route.startswith("/gradio_api/call/"),
                               named=route.startswith("/gradio_api/call/v2/"))
        if problem is not None:
            status, detail = problem
            await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)
            return
        sent = False

        async def replay():  # the body read above, then the connection's own messages (a disconnect)
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def problem(self, body: bytes, endpoint: str | None, simple: bool, named: bool) -> tuple[int, str] | None:
        """(HTTP status, message) for a request that names no function or sends too few inputs, else None.
        ``endpoint``: the name in the path (None: the queue); ``simple``: /call/NAME (its data may leave out
        the inputs the API skips); ``named``: /call/v2/NAME (inputs by name: Gradio checks them itself)."""
        try:
            request = json.loads(body)
        except ValueError:
            return None
        if not isinstance(request, dict):
            return None
        fns = self.blocks.fns
        index = request.get("fn_index")
        if isinstance(index, str) and re.fullmatch(r"\s*[+-]?\d+\s*", index):  # pydantic reads "3" as 3
            index = int(index)
        elif isinstance(index, float) and index.is_integer():
            index = int(index)
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int):
                return None  # not a whole number: Gradio's own check refuses it
            fn = fns.get(index)
            if fn is None:
                numbered = f"numbered {min(fns)} to {max(fns)}" if fns else "none"
                return 404, (f"Unknown function index (fn_index) {index}: this app's functions are {numbered}; "
                             f"or call an endpoint by name: {self.endpoints()}.")
        elif endpoint is not None:
            fn = next((fn for fn in fns.values() if fn.api_name == endpoint), None)
            if fn is None:
                return 404, f"Unknown endpoint {quoted('/' + endpoint)}: this app's endpoints are {self.endpoints()}."
        else:
            return None  # the queue without fn_index: Gradio answers "No function index provided."
        data = request.get("data")
        if named or not isinstance(data, list):
            return None
        needed = len(fn.inputs)
        named = [block for block in fn.inputs if not getattr(block, "skip_api", False)]
        if len(data) >= needed or simple and len(data) == len(named):  # /call/NAME fills the inputs the API skips
            return None
        what = f"The endpoint /{fn.api_name}" if fn.api_name else f"The function {fn._id}"
        labels = ", ".join(str(getattr(block, "label", None) or type(block).__name__) for block in fn.inputs)
        return 422, (f"{what} (fn_index {fn._id}) takes {needed} input values ({labels}); the request sent "
                     f"{len(data)}.")

    def endpoints(self) -> str:
        names = [f"/{fn.api_name}" for fn in self.blocks.fns.values()
                 if fn.api_name and getattr(fn, "api_visibility", "public") == "public"]
        return ", ".join(names) or "none"


class CheckedBlocks(gr.Blocks):
    """``gr.Blocks`` whose server runs :class:`RequestCheck` first, however it is launched (``main()``, the tests)."""

    def launch(self, *args, app_kwargs: dict | None = None, **kwargs):
        app_kwargs = dict(app_kwargs or {})
        app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(RequestCheck, blocks=self)]
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)


def _user_errors(fn):
    """Turn an input error (or a checkpoint that cannot be loaded) into a message in the page, without a
    traceback in the server's log. The page renders a message as HTML: what the visitor typed is escaped."""

    def to_gradio(error: Exception) -> gr.Error:
        return gr.Error(html.escape(str(error), quote=False), title="Please check your input", print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args):
            try:
                yield from fn(*args)
            except (InputError, ValueError, FileNotFoundError) as error:
                raise to_gradio(error) from None
        return stream

    @functools.wraps(fn)
    def call(*args):
        try:
            return fn(*args)
        except (InputError, ValueError, FileNotFoundError) as error:
            raise to_gradio(error) from None
    return call


def _model_summary(served: ServedModel) -> str:
    parameters = count_parameters(served.model)
    kind = ("control-code model: codes are special tokens" if served.kind == "control"
            else "plain causal LM: codes are typed text prefixes")
    context = f" · context {served.context} tokens" if served.context else ""
    codes = f" · codes: {', '.join(served.codes)}" if served.codes else ""
    size = f"{parameters / 1e6:.1f}M" if parameters >= 1e6 else f"{parameters:,}"
    weights = "" if served.weights == "float32" else f" ({served.weights} weights)"
    return f"**{served.name}** · {kind} · {size} parameters{weights}{context}{codes}"


def _default_codes(served: ServedModel | None) -> list[str]:
    """The code of each of the MAX_COLUMNS columns when a model is loaded ("" where the model has no more)."""
    if served is None:
        return [""] * MAX_COLUMNS
    if served.kind == "plain":
        return (served.codes + DEFAULT_CODES)[:MAX_COLUMNS]
    preferred = [code for code in DEFAULT_CODES if code in served.codes]
    codes = preferred + [code for code in served.codes if code not in preferred]
    if codes and len(codes) < MIN_COLUMNS:  # a one-code model: its code in both columns (Same seed off to compare)
        codes = (codes * MIN_COLUMNS)[:MIN_COLUMNS]
    return (codes + [""] * MAX_COLUMNS)[:MAX_COLUMNS]


def _default_columns(served: ServedModel | None) -> int:
    """How many columns to show for a model: one per code, MIN_COLUMNS to MAX_COLUMNS, so that no shown column
    is empty (a model with 2 codes opens with 2 columns and the default Generate works)."""
    if served is None or served.kind == "plain":  # a plain model's codes are typed prefixes: any number
        return MAX_COLUMNS
    return min(MAX_COLUMNS, max(MIN_COLUMNS, len(served.codes)))


def _example_fits(served: ServedModel | None, codes: list[str]) -> bool:
    """Whether the model knows an example's codes (a plain model takes any code: they are text prefixes)."""
    if served is None:
        return False
    return served.kind == "plain" or all(code.split(" ")[0] in served.codes for code in codes)


def _max_new_tokens_label(served: ServedModel | None) -> str:
    return f"Max new tokens (≤ {served.max_new_tokens if served else MAX_NEW_TOKENS})"


def _label_angle(n_codes: int) -> int:
    """The angle of the chart's code labels: level for a few codes; upright beyond, as level labels of
    20 codes overlap."""
    return 0 if n_codes <= LEVEL_LABELS else -90


def build_demo(model: str | None = None, max_queue: int = DEFAULT_MAX_QUEUE, weights: str = "auto") -> gr.Blocks:
    """The page. ``model``: the ``--model`` argument (a folder, a fetched model's name or a local hub id), offered
    first; ``weights``: the precision every model is served with (``lmstudy.weights_precision``).

    Every handler that runs the model gets the raw values the page or an API client sent (Gradio's
    preprocessing off: ``preprocess=False``) and checks them with ``lmstudy.ctrl.serving``'s one check
    per kind of field, so a bad value is a message, never Gradio's generic error and a traceback."""
    registry = ModelRegistry(extra=model, weights=weights)
    default = registry.default()
    served = registry.get(default) if default else None  # loaded once, before the first visitor

    # One parameter per field (their names are the API's): the codes of the MAX_COLUMNS = 4 columns.
    def compare(model_name, prompt, n_columns, code_1, code_2, code_3, code_4, decoding, temperature, top_k, top_p,
                penalty, theta, max_new_tokens, seed, same_seed):
        current = registry.get(model_name)
        codes = [code_1, code_2, code_3, code_4][:COLUMNS.check(n_columns)]
        comparison = prepare_comparison(current, prompt, codes, decoding, temperature, top_k, top_p, penalty, theta,
                                        max_new_tokens, seed, same_seed)
        status = " ".join(comparison.notices)
        last = 0.0
        for columns in on_model_thread(stream_comparison(current, comparison)):
            done = all(column.finished for column in columns)
            if not done and time.perf_counter() - last < STREAM_INTERVAL:
                continue
            last = time.perf_counter()
            texts = [c.text for c in columns] + [""] * (MAX_COLUMNS - len(columns))
            stats = [c.summary() for c in columns] + [""] * (MAX_COLUMNS - len(columns))
            yield (*texts, *stats, status)

    def attribute(model_name, text, codes, prior):
        table, notice = run_on_model_thread(attribute_text, registry.get(model_name), text, codes, prior)
        chart = table[["code", "probability", "perplexity"]]
        shown = table[["rank", "code", "probability", "perplexity", "log_likelihood", "prior", "tokens"]].round(4)
        return gr.BarPlot(chart, x_label_angle=_label_angle(len(chart))), shown, notice

    def select_model(model_name, max_new_tokens):
        current = registry.get(model_name)
        fits = [_example_fits(current, codes) for _, codes in EXAMPLES]
        columns = _default_columns(current)  # the number of columns follows the model's codes
        return (_model_summary(current), columns,
                *[gr.update(choices=current.codes, value=code) for code in _default_codes(current)],
                gr.update(label=_max_new_tokens_label(current),
                          value=fit_max_new_tokens(max_new_tokens, current, DEFAULT_NEW_TOKENS)),
                gr.update(visible=any(fits)), *[gr.update(visible=fit) for fit in fits], *show_columns(columns))

    def load_example(index, model_name, max_new_tokens):
        current = registry.get(model_name)
        example_prompt, example_codes = EXAMPLES[index]
        if not _example_fits(current, example_codes):
            raise InputError(f"This example's codes ({', '.join(example_codes)}) are not all codes of "
                             f"{current.name}: choose another example or model.")
        tokens = fit_max_new_tokens(max_new_tokens, current, DEFAULT_NEW_TOKENS)
        notice = (f"**The example changed the sampling settings** (opened above): {EXAMPLE_SETTINGS['decoding']} "
                  f"decoding, the paper's repetition penalty ({EXAMPLE_SETTINGS['penalty']}, θ = "
                  f"{EXAMPLE_SETTINGS['theta']}), max new tokens {tokens}.")
        codes = (list(example_codes) + [""] * MAX_COLUMNS)[:MAX_COLUMNS]
        return (example_prompt, len(example_codes), *codes, EXAMPLE_SETTINGS["decoding"], EXAMPLE_SETTINGS["penalty"],
                EXAMPLE_SETTINGS["theta"], tokens, gr.Accordion(open=True), notice)

    def show_columns(n_columns):
        return [gr.update(visible=k < int(n_columns)) for k in range(MAX_COLUMNS)]

    with CheckedBlocks(title="lmstudy: control codes", analytics_enabled=False) as demo:
        gr.Markdown("# lmstudy · control codes side by side\n"
                    "One prompt, several control codes (Keskar et al. 2019, CTRL), generated in one batch.")
        with gr.Row():
            model_box = gr.Dropdown(choices=registry.labelled_choices(), value=default, label="Model", scale=1,
                                    elem_id="model")
            model_info = gr.Markdown(_model_summary(served) if served else f"**{NO_CHECKPOINT}**",
                                     elem_id="model-info")

        with gr.Tab("Compare"):
            prompt = gr.Textbox(label="Prompt", value="The knife", lines=2, elem_id="prompt")
            with gr.Row():
                n_columns = gr.Radio(list(range(MIN_COLUMNS, MAX_COLUMNS + 1)), value=_default_columns(served),
                                     label="Columns", elem_id="n-columns")
                same_seed = gr.Checkbox(value=True, label="Same seed in every column", elem_id="same-seed")
                seed = gr.Number(value=0, precision=0, label="Seed", elem_id="seed")
                max_new_tokens = gr.Number(
                    value=min(DEFAULT_NEW_TOKENS, served.max_new_tokens) if served else DEFAULT_NEW_TOKENS,
                    precision=0, label=_max_new_tokens_label(served), elem_id="max-new-tokens")
            with gr.Accordion("Sampling", open=False, elem_id="sampling") as sampling_panel:
                with gr.Row():
                    decoding = gr.Radio(list(DECODINGS), value="sample", label="Decoding", elem_id="decoding")
                    temperature = gr.Number(value=0.8, label="Temperature (sampling)", elem_id="temperature")
                    top_k = gr.Number(value=40, precision=0, label="Top-k (0: off)", elem_id="top-k")
                    top_p = gr.Number(value=1.0, label="Top-p (nucleus, 1: off)", elem_id="top-p")
                    penalty = gr.Radio(list(PENALTIES), value="ctrl",
                                       label="Repetition penalty (ctrl: the paper's; hf: transformers')",
                                       elem_id="penalty")
                    theta = gr.Number(value=1.2, label="Penalty θ", elem_id="theta")
            settings_notice = gr.Markdown(elem_id="settings-notice")
            generate = gr.Button("Generate", variant="primary", elem_id="generate")
            status = gr.Markdown(elem_id="status")
            code_boxes, text_boxes, stat_boxes, column_groups = [], [], [], []
            with gr.Row(equal_height=False):
                for k, code in enumerate(_default_codes(served)):
                    with gr.Column(min_width=200, elem_id=f"column-{k + 1}",
                                   visible=k < _default_columns(served)) as group:
                        code_boxes.append(gr.Dropdown(
                            choices=served.codes if served else [], value=code, allow_custom_value=True,
                            label=f"Control code {k + 1}", elem_id=f"code-{k + 1}"))
                        text_boxes.append(gr.Textbox(label=f"Column {k + 1}", lines=10, interactive=False,
                                                     elem_id=f"text-{k + 1}"))
                        # No LaTeX: a code typed with $$ is shown as typed (serving.markdown_literal escapes the rest).
                        stat_boxes.append(gr.Markdown(elem_id=f"stats-{k + 1}", latex_delimiters=[]))
                    column_groups.append(group)
            # Every example has its button; the model decides which are shown (those whose codes it knows).
            fits = [_example_fits(served, codes) for _, codes in EXAMPLES]
            with gr.Column(visible=any(fits), elem_id="examples") as examples_box:
                gr.Markdown("**Examples** (greedy, the paper's penalty θ = 1.2): one prompt under several codes")
                with gr.Row():
                    example_buttons = [gr.Button(f"{p} · {' / '.join(c)}", size="sm", visible=fit,
                                                 elem_id=f"example-{k + 1}")
                                       for k, ((p, c), fit) in enumerate(zip(EXAMPLES, fits))]

        with gr.Tab("Attribute"):
            text = gr.Textbox(label="Text", lines=6, elem_id="attr-text",
                              value="Rating: 5.0\nA wonderful film with a great cast.")
            with gr.Row():
                attr_codes = gr.Textbox(label="Codes (comma-separated; empty: all of the model's codes)",
                                        elem_id="attr-codes")
                prior = gr.Radio(list(PRIORS), value="uniform",
                                 label="Prior p(c) (empirical: the training mixture)", elem_id="prior")
            attr_button = gr.Button("Attribute", variant="primary", elem_id="attribute")
            chart = gr.BarPlot(x="code", y="probability", sort="-y", y_lim=[0, 1], label="p(code | text)",
                               tooltip=["code", "probability", "perplexity"], elem_id="chart")
            table = gr.Dataframe(label="Ranking", interactive=False, elem_id="ranking")
            attr_notice = gr.Markdown(elem_id="attr-notice")

        compare_inputs = [model_box, prompt, n_columns, *code_boxes, decoding, temperature, top_k, top_p, penalty,
                          theta, max_new_tokens, seed, same_seed]
        compare_outputs = [*text_boxes, *stat_boxes, status]
        # One worker for everything that runs the model: memory stays bounded, requests wait in the queue.
        # preprocess=False: the handlers check the raw values themselves (see the docstring).
        model_events = dict(concurrency_id="model", preprocess=False)
        generate.click(_user_errors(compare), compare_inputs, compare_outputs, api_name="compare", **model_events)
        generate.click(lambda: "", None, settings_notice, queue=False, api_visibility="private")
        attr_button.click(_user_errors(attribute), [model_box, text, attr_codes, prior], [chart, table, attr_notice],
                          api_name="attribute", **model_events)
        model_box.change(_user_errors(select_model), [model_box, max_new_tokens],
                         [model_info, n_columns, *code_boxes, max_new_tokens, examples_box, *example_buttons,
                          *column_groups],
                         api_name="select_model", **model_events)
        n_columns.change(show_columns, n_columns, column_groups, queue=False, api_visibility="private")
        example_outputs = [prompt, n_columns, *code_boxes, decoding, penalty, theta, max_new_tokens, sampling_panel,
                           settings_notice]
        for k, button in enumerate(example_buttons):
            # Undocumented endpoints (/example_1, ...): callable, so that tests can drive them like the page does.
            button.click(_user_errors(functools.partial(load_example, k)), [model_box, max_new_tokens],
                         example_outputs, api_name=f"example_{k + 1}", api_visibility="undocumented", **model_events,
                         ).success(show_columns, n_columns, column_groups, queue=False, api_visibility="private",
                                   ).success(_user_errors(compare), compare_inputs, compare_outputs,
                                             api_visibility="private", **model_events)
    demo.queue(max_size=max_queue, default_concurrency_limit=1)
    return demo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="lmstudy: control codes side by side in the browser")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also create a public Gradio share link")
    parser.add_argument("--model", metavar="ID_OR_PATH",
                        help="a control-code folder or any local Hugging Face causal LM, GPT-2 or Llama family (e.g. smollm2: "
                        "python -m lmstudy models fetch smollm2), offered first")
    parser.add_argument("--weights", choices=WEIGHTS, default="auto",
                        help="weights' precision for generation (default auto: bfloat16 for models of 50M parameters "
                        "or more where the hardware has bfloat16 instructions, else float32; lmstudy.weights_precision)")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help="requests that may wait; beyond, a visitor is told the app is busy")
    args = parser.parse_args(argv)
    try:
        demo = build_demo(args.model, args.max_queue, args.weights)
    except (InputError, ValueError, FileNotFoundError) as error:
        parser.exit(2, f"app.py: error: {error}\n")
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, ssr_mode=False)


if __name__ == "__main__":
    main()
