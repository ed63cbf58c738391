"""lmstudy in the browser: control codes side by side.

    python app.py                         # http://127.0.0.1:7860, the bundled demo checkpoint
    python app.py --port 8000 --max-queue 32
    python app.py --model gpt2            # any local Hugging Face causal LM; codes become text prefixes
    python app.py --host 0.0.0.0          # listen on every interface (default: this machine only)
    python app.py --share                 # also ask Gradio for a public share link

Tabs:
- **Compare**: one prompt, 2 to 4 columns, each with its own control code (pick one of the model's
  codes or type a composite one such as ``Reviews Rating: 1.0``), shared sampling settings; all
  columns are generated in one batch and stream in as they grow, with each column's perplexity and
  tokens/second. "Same seed" gives every column the same seed (reproducible, and the columns differ
  only by their codes). The example buttons run the paper's Table 1 idea: one prompt, several codes.
- **Attribute**: paste a text, get p(code | text) as a bar chart with per-code perplexities, under a
  uniform or the training mixture's (empirical) prior.

The model selector offers the allow-listed local checkpoints (``models/ctrl-demo`` first, other
``models/`` folders, control-code runs) and the ``--model`` argument, never a path from the browser.
Everything the page does is in ``lmstudy.ctrl.serving``; this file is the page and the command
line. ``build_demo()`` returns the ``gr.Blocks`` (queue configured); only ``main()`` launches it.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import time

import gradio as gr

from lmstudy.ctrl.serving import (
    MAX_COLUMNS,
    NO_CHECKPOINT,
    InputError,
    ModelRegistry,
    ServedModel,
    attribute_text,
    prepare_comparison,
    stream_comparison,
)
from lmstudy.training import count_parameters

STREAM_INTERVAL = 0.1  # seconds between two updates of the page while generating
DEFAULT_MAX_QUEUE = 16

# The paper's Table 1 idea: one prompt under several domain codes (greedy, penalty θ = 1.2).
EXAMPLES = [
    ("The knife", ["Wikipedia", "Books", "Reviews Rating: 1.0", "r/worldnews"]),
    ("The president said", ["Wikipedia", "News Text:", "r/worldnews", "IRC"]),
    ("This film", ["Reviews Rating: 1.0", "Reviews Rating: 5.0", "Books", "r/television"]),
    ("What is", ["Questions Q:", "Wikipedia", "IRC"]),
]
DEFAULT_CODES = ["Wikipedia", "Books", "Reviews", "r/worldnews"]


def _user_errors(fn):
    """Turn an input error (or a checkpoint that cannot be loaded) into a message in the page."""

    def to_gradio(error: Exception) -> gr.Error:
        return gr.Error(str(error), title="Please check your input", print_exception=False)

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
    return f"**{served.name}** · {kind} · {size} parameters{context}{codes}"


def _default_codes(served: ServedModel | None) -> list[str]:
    if served is None:
        return [""] * MAX_COLUMNS
    if served.kind == "plain":
        return (served.codes + DEFAULT_CODES)[:MAX_COLUMNS]
    preferred = [code for code in DEFAULT_CODES if code in served.codes]
    rest = [code for code in served.codes if code not in preferred]
    return (preferred + rest + [""] * MAX_COLUMNS)[:MAX_COLUMNS]


def _examples_for(served: ServedModel | None) -> list[tuple[str, list[str]]]:
    """The examples whose codes the default model knows (every example for a plain model)."""
    if served is None:
        return []
    if served.kind == "plain":
        return EXAMPLES
    return [(prompt, codes) for prompt, codes in EXAMPLES if all(c.split(" ")[0] in served.codes for c in codes)]


def build_demo(model: str | None = None, max_queue: int = DEFAULT_MAX_QUEUE) -> gr.Blocks:
    """The page. ``model``: the ``--model`` argument (a folder or a local hub id), offered first."""
    registry = ModelRegistry(extra=model)
    default = registry.default()
    served = registry.get(default) if default else None  # loaded once, before the first visitor

    def compare(model_name, prompt, n_columns, *rest):
        codes, settings = rest[:MAX_COLUMNS], rest[MAX_COLUMNS:]
        current = registry.get(model_name)
        n = int(n_columns) if str(n_columns).isdigit() else 0
        comparison = prepare_comparison(current, prompt, list(codes[:n]), *settings)
        status = " ".join(comparison.notices)
        last = 0.0
        for columns in stream_comparison(current, comparison):
            done = all(column.finished for column in columns)
            if not done and time.perf_counter() - last < STREAM_INTERVAL:
                continue
            last = time.perf_counter()
            texts = [c.text for c in columns] + [""] * (MAX_COLUMNS - len(columns))
            stats = [c.summary() for c in columns] + [""] * (MAX_COLUMNS - len(columns))
            yield (*texts, *stats, status)

    def attribute(model_name, text, codes, prior):
        table, notice = attribute_text(registry.get(model_name), text, codes, prior)
        chart = table[["code", "probability", "perplexity"]]
        shown = table[["rank", "code", "probability", "perplexity", "log_likelihood", "prior", "tokens"]].round(4)
        return chart, shown, notice

    def select_model(model_name):
        current = registry.get(model_name)
        codes = _default_codes(current)
        return (_model_summary(current),
                *[gr.update(choices=current.codes, value=code) for code in codes])

    def show_columns(n_columns):
        return [gr.update(visible=k < int(n_columns)) for k in range(MAX_COLUMNS)]

    with gr.Blocks(title="lmstudy: control codes", analytics_enabled=False) as demo:
        gr.Markdown("# lmstudy · control codes side by side\n"
                    "One prompt, several control codes (Keskar et al. 2019, CTRL), generated in one batch.")
        with gr.Row():
            model_box = gr.Dropdown(choices=list(registry.choices()), value=default, label="Model", scale=1,
                                    elem_id="model")
            model_info = gr.Markdown(_model_summary(served) if served else f"**{NO_CHECKPOINT}**",
                                     elem_id="model-info")

        with gr.Tab("Compare"):
            prompt = gr.Textbox(label="Prompt", value="The knife", lines=2, elem_id="prompt")
            with gr.Row():
                n_columns = gr.Radio([2, 3, 4], value=MAX_COLUMNS, label="Columns", elem_id="n-columns")
                same_seed = gr.Checkbox(value=True, label="Same seed in every column", elem_id="same-seed")
                seed = gr.Number(value=0, precision=0, label="Seed", elem_id="seed")
                max_new_tokens = gr.Number(value=min(40, served.max_new_tokens) if served else 40, precision=0,
                                           label=f"Max new tokens (≤ {served.max_new_tokens if served else 256})",
                                           elem_id="max-new-tokens")
            with gr.Accordion("Sampling", open=False):
                with gr.Row():
                    decoding = gr.Radio(["greedy", "sample"], value="sample", label="Decoding", elem_id="decoding")
                    temperature = gr.Number(value=0.8, label="Temperature (sampling)", elem_id="temperature")
                    top_k = gr.Number(value=40, precision=0, label="Top-k (0: off)", elem_id="top-k")
                    top_p = gr.Number(value=1.0, label="Top-p (nucleus, 1: off)", elem_id="top-p")
                    penalty = gr.Radio(["none", "ctrl", "hf"], value="ctrl",
                                       label="Repetition penalty (ctrl: the paper's; hf: transformers')",
                                       elem_id="penalty")
                    theta = gr.Number(value=1.2, label="Penalty θ", elem_id="theta")
            generate = gr.Button("Generate", variant="primary", elem_id="generate")
            status = gr.Markdown(elem_id="status")
            code_boxes, text_boxes, stat_boxes, column_groups = [], [], [], []
            with gr.Row(equal_height=False):
                for k, code in enumerate(_default_codes(served)):
                    with gr.Column(min_width=200, elem_id=f"column-{k + 1}") as group:
                        code_boxes.append(gr.Dropdown(
                            choices=served.codes if served else [], value=code, allow_custom_value=True,
                            label=f"Control code {k + 1}", elem_id=f"code-{k + 1}"))
                        text_boxes.append(gr.Textbox(label=f"Column {k + 1}", lines=10, interactive=False,
                                                     elem_id=f"text-{k + 1}"))
                        stat_boxes.append(gr.Markdown(elem_id=f"stats-{k + 1}"))
                    column_groups.append(group)
            examples = _examples_for(served)
            if examples:
                gr.Markdown("**Examples** (greedy, the paper's penalty θ = 1.2): one prompt under several codes")
                with gr.Row():
                    example_buttons = [(gr.Button(f"{p} · {' / '.join(c)}", size="sm"), p, c) for p, c in examples]

        with gr.Tab("Attribute"):
            text = gr.Textbox(label="Text", lines=6, elem_id="attr-text",
                              value="Rating: 5.0\nA wonderful film with a great cast.")
            with gr.Row():
                attr_codes = gr.Textbox(label="Codes (comma-separated; empty: all of the model's codes)",
                                        elem_id="attr-codes")
                prior = gr.Radio(["uniform", "empirical"], value="uniform",
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
        generate.click(_user_errors(compare), compare_inputs, compare_outputs, api_name="compare",
                       concurrency_id="model")
        attr_button.click(_user_errors(attribute), [model_box, text, attr_codes, prior], [chart, table, attr_notice],
                          api_name="attribute", concurrency_id="model")
        model_box.change(_user_errors(select_model), model_box, [model_info, *code_boxes], api_name="select_model",
                         concurrency_id="model")
        n_columns.change(show_columns, n_columns, column_groups, queue=False, api_visibility="private")
        for button, example_prompt, example_codes in (example_buttons if examples else []):
            values = (example_prompt, len(example_codes), *(list(example_codes) + [""] * MAX_COLUMNS)[:MAX_COLUMNS],
                      "greedy", "ctrl", 1.2)
            button.click(lambda values=values: values, None,
                         [prompt, n_columns, *code_boxes, decoding, penalty, theta],
                         queue=False, api_visibility="private",
                         ).then(show_columns, n_columns, column_groups, queue=False, api_visibility="private",
                                ).then(_user_errors(compare), compare_inputs, compare_outputs, concurrency_id="model",
                                       api_visibility="private")
    demo.queue(max_size=max_queue, default_concurrency_limit=1)
    return demo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="lmstudy: control codes side by side in the browser")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also create a public Gradio share link")
    parser.add_argument("--model", metavar="ID_OR_PATH",
                        help="a control-code folder or any local Hugging Face causal LM (e.g. gpt2), offered first")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help="requests that may wait; beyond, a visitor is told the app is busy")
    args = parser.parse_args(argv)
    try:
        demo = build_demo(args.model, args.max_queue)
    except (InputError, ValueError, FileNotFoundError) as error:
        parser.exit(2, f"app.py: error: {error}\n")
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, ssr_mode=False)


if __name__ == "__main__":
    main()
