"""``python -m lmstudy generate`` and ``python -m lmstudy attribute``: the CTRL model from the shell.

    python -m lmstudy generate --model DIR --code Reviews --code News --prompt "The film" --penalty ctrl
    python -m lmstudy attribute --model DIR "Rating: 5.0 A wonderful film."

``register(subparsers)`` adds both commands (the lead wires it into ``lmstudy/__main__.py``).
Bad input (unknown code, empty prompt, a folder that is no model) raises ``ValueError`` /
``FileNotFoundError``, which ``__main__`` prints as one ``lmstudy: error:`` line.
"""

from __future__ import annotations



def _codes(values: list[str] | None) -> list[str] | None:
    """``--code A --code B,C`` -> [A, B, C]; None when not given."""
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _generate(args) -> int:
    from lmstudy.ctrl.generation import generate_codes
    from lmstudy.ctrl.model import load_control_model
    from lmstudy.ctrl.sampling import SamplingConfig

    loaded = load_control_model(args.model)
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, greedy=args.greedy,
                              penalty=args.penalty, theta=args.theta, exempt_newlines=args.exempt_newlines)
    codes = _codes(args.code) or loaded.codes
    for result in generate_codes(loaded.model, loaded.tokenizer, args.prompt, codes, sampling,
                                 max_new_tokens=args.max_new_tokens, seed=args.seed):
        print(f"=== {result.code} (seed {result.seed}) ===")
        print(result.prompt + result.text)
        print()
    return 0


def _attribute(args) -> int:
    import pandas as pd

    from lmstudy.ctrl.attribution import attribute
    from lmstudy.ctrl.model import load_control_model

    loaded = load_control_model(args.model)
    table = attribute(loaded.model, loaded.tokenizer, args.text, codes=_codes(args.code), prior=args.prior,
                      mixture=loaded.mixture)
    with pd.option_context("display.max_rows", None, "display.width", 120):
        print(table.head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def register(subparsers) -> None:
    """Add ``generate`` and ``attribute`` to the ``lmstudy`` command line."""
    generate = subparsers.add_parser(
        "generate", help="continue a prompt under one or more control codes (CTRL)",
        description="Generate from a control-code model, one column per code, in one batch with a fixed seed.",
    )
    generate.add_argument("--model", required=True, help="folder written by lmstudy.ctrl.model.save_control_model")
    generate.add_argument("--code", action="append", metavar="CODE",
                          help="control code (repeat or comma-separate; default: every code of the model)")
    generate.add_argument("--prompt", required=True, help="text to continue")
    generate.add_argument("--max-new-tokens", type=int, default=50)
    generate.add_argument("--temperature", type=float, default=1.0)
    generate.add_argument("--top-k", type=int, default=0, help="0: off")
    generate.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling; 1.0: off")
    generate.add_argument("--greedy", action="store_true", help="argmax instead of sampling")
    generate.add_argument("--penalty", choices=("none", "ctrl", "hf"), default="none",
                          help="ctrl: the paper's (divide seen tokens' logits by theta); hf: transformers' "
                               "repetition_penalty")
    generate.add_argument("--theta", type=float, default=1.2, help="the penalty's theta (paper: 1.2)")
    generate.add_argument("--exempt-newlines", action="store_true", help="ctrl penalty: never penalise newlines")
    generate.add_argument("--seed", type=int, default=0, help="every column samples with this seed")
    generate.set_defaults(handler=_generate)

    attribute = subparsers.add_parser(
        "attribute", help="rank the control codes as the source of a text: p(code | text) (CTRL)",
        description="Source attribution: log p(text | code) for every code in one batch, "
                    "with a prior -> p(code | text).",
    )
    attribute.add_argument("text", help="the text to attribute")
    attribute.add_argument("--model", required=True, help="folder written by lmstudy.ctrl.model.save_control_model")
    attribute.add_argument("--code", action="append", metavar="CODE", help="restrict to these codes (default: all)")
    attribute.add_argument("--prior", choices=("uniform", "mixture"), default="uniform",
                           help="uniform (the paper's) or the model's training mixture")
    attribute.add_argument("--top", type=int, default=20, help="print the first N codes")
    attribute.set_defaults(handler=_attribute)


__all__ = ["register"]
