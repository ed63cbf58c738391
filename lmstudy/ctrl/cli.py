"""``python -m lmstudy generate``, ``attribute``, ``ctrl add-codes`` and ``ctrl quality``: the CTRL model from
the shell.

    python -m lmstudy generate --model DIR --code Reviews --code News --prompt "The film" --penalty ctrl
    python -m lmstudy generate --model DIR --code "r/Sports English:" --prompt "The team won ; German:"
    python -m lmstudy attribute --model DIR "Rating: 5.0 A wonderful film."
    python -m lmstudy ctrl add-codes --model DIR --code Recipes=recipes/ --code Poems=poems.jsonl
    python -m lmstudy ctrl train-smol --scale cpu   # the SmolLM2 control-code model, 3 seeds (~2 h)
    python -m lmstudy ctrl compare                  # ctrl-demo vs the SmolLM2 model, every measure (~20 min)
    python -m lmstudy ctrl quality   # study 04's judged repetition sweep and Rating: probe (lmstudy.ctrl.quality)

``register(subparsers)`` adds the three commands (the lead wires it into ``lmstudy/__main__.py``).
Bad input (unknown code, empty prompt, a folder that is no model) raises ``ValueError`` /
``FileNotFoundError``, which ``__main__`` prints as one ``lmstudy: error:`` line.
"""

from __future__ import annotations



def _codes(values: list[str] | None) -> list[str] | None:
    """``--code A --code B,C`` -> [A, B, C]; None when not given. A value with a space is one composite
    code, never split (``--code "r/Sports English:"``: its template may hold commas)."""
    if not values:
        return None
    return [name.strip() for value in values
            for name in ([value] if " " in value.strip() else value.split(",")) if name.strip()]


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


def _add_codes(args) -> int:
    import pandas as pd

    from lmstudy.ctrl.add_codes import AddCodesConfig, add_codes, default_out_dir, parse_code_paths

    new_codes = parse_code_paths(args.code)
    out = args.out or default_out_dir(args.model, list(new_codes))
    config = AddCodesConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, held_out=args.held_out,
                            replay_docs=args.replay_docs, eval_docs=args.eval_docs, text_column=args.text_column,
                            seed=args.seed)
    report = add_codes(args.model, new_codes, out, config, force=args.force)
    with pd.option_context("display.max_rows", None, "display.width", 140):
        print(report.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out} (the app lists it; python app.py --model {out})")
    return 0


def _quality(args) -> int:
    import torch

    from lmstudy.ctrl.quality import write_quality_tables

    torch.set_num_threads(args.threads)
    for path in write_quality_tables(args.model, args.judge, args.out):
        print(f"wrote {path}")
    return 0


def _train_smol(args) -> int:
    import torch

    from lmstudy.ctrl.compare import RESULTS
    from lmstudy.ctrl.model import control_run, export_delta, smol_configs, train_control_model
    from lmstudy.paths import REPO_ROOT
    from lmstudy.runs import training_seconds

    torch.set_num_threads(args.threads)
    overrides = {"seeds": args.seeds} if args.seeds else {}
    configs = smol_configs(args.scale, **overrides)
    export = args.export if args.export is not None else ("models/ctrl-smollm2" if args.scale == "cpu" else "")
    first_seed = smol_configs(args.scale)[0].seed  # the app's model: the scale's first seed, whatever --seeds says
    for config in configs:
        print(f"seed {config.seed}: {config.max_steps} steps x {config.batch_size} x {config.seq_len} tokens "
              f"({control_run(config).path})", flush=True)
        train_control_model(config)
        run = control_run(config)
        seconds = training_seconds(run)
        print(f"seed {config.seed}: val_loss {run.metrics.get('val_loss', float('nan')):.4f}, "
              f"{seconds:.0f} s of training", flush=True)
        if export:  # the first seed is the app's model (a rule fixed before any seed ran); the others are kept for
            # the claims that rest on training (lmstudy.ctrl.compare)
            folder = REPO_ROOT / export if config.seed == first_seed else RESULTS / "models" / f"seed-{config.seed}"
            print(f"exported to {export_delta(config, folder, args.scale)}", flush=True)
    return 0


def _compare(args) -> int:
    import torch

    from lmstudy.ctrl.compare import PARTS, CompareConfig, compare, default_models, missing_parts, write_figures
    from lmstudy.paths import figures_dir

    torch.set_num_threads(args.threads)
    models = default_models()
    unknown = set(args.models or []) - set(models)
    if unknown:
        raise ValueError(f"unknown model(s) {sorted(unknown)}; models: {', '.join(models)}")
    config = CompareConfig(eval_docs=args.eval_docs, max_chars=args.max_chars)
    written = compare({label: models[label] for label in args.models or models}, config, parts=args.parts or PARTS,
                      force=args.force)
    print(f"wrote {len(written)} table(s)" + "".join(f"\n  {path}" for path in written))
    missing = missing_parts()
    if missing:
        print(f"not yet measured: {', '.join(missing)}; the figures are drawn once every part is there")
        return 0
    seeds_missing = missing_parts(seeds=True)
    if seeds_missing:
        print(f"drawn without the seeds not yet measured: {', '.join(seeds_missing)}")
    figures = write_figures(figures_dir())
    print("figures:" + "".join(f"\n  {path}" for path in figures.values()))
    return 0


def _register_ctrl(subparsers) -> None:
    ctrl = subparsers.add_parser("ctrl", help="control-code model tools (CTRL study): add-codes, train-smol, compare, quality")
    commands = ctrl.add_subparsers(dest="ctrl_command", required=True, metavar="SUBCOMMAND")
    add = commands.add_parser(
        "add-codes", help="fine-tune a copy of a control-code model with new codes learnt from your own text",
        description="New control codes from your own text (lmstudy.ctrl.add_codes): each --code NAME=PATH (a folder "
                    "of .txt files or a .jsonl file with a text field) becomes the special token <|NAME|>; the "
                    "copy is trained on the new text plus replayed text of the old codes, so they keep working. "
                    "Prints each code's held-out loss and attribution accuracy before and after.",
    )
    add.add_argument("--model", required=True, help="folder written by lmstudy.ctrl.model.save_control_model")
    add.add_argument("--code", action="append", required=True, metavar="NAME=PATH",
                     help="a new code and its documents (repeat for several)")
    add.add_argument("--out", help="where to write the new model (default: models/<model>+<codes>, listed by the app)")
    add.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    add.add_argument("--batch-size", type=int, default=8)
    add.add_argument("--lr", type=float, default=5e-4)
    add.add_argument("--held-out", type=float, default=0.1, help="share of each new code's documents held out")
    add.add_argument("--replay-docs", type=int, default=100, help="training documents replayed per old code")
    add.add_argument("--eval-docs", type=int, default=10, help="held-out documents per old code measured")
    add.add_argument("--text-column", default="", help="the .jsonl field holding the text (default: text)")
    add.add_argument("--seed", type=int, default=0)
    add.add_argument("--force", action="store_true", help="replace --out if it exists")
    add.set_defaults(handler=_add_codes)
    smol = commands.add_parser(
        "train-smol", help="train the SmolLM2 control-code model (LoRA + code rows), one run per seed",
        description="SmolLM2-135M (python -m lmstudy models fetch smollm2) + the 21 codes, a LoRA and the code rows "
                    "trained on the study's 21-domain mixture (lmstudy.ctrl.smol_ctrl; sizes: "
                    "lmstudy.scales.SMOLLM2_CTRL). Runs are cached and resumable: rerun the same command after an "
                    "interruption. The first seed's model is exported (cpu scale: models/ctrl-smollm2, the app's "
                    "default model), the others to results/ctrl_smollm2/models/seed-N.",
    )
    smol.add_argument("--scale", default="cpu", help="smoke | cpu | paper (default cpu: ~40 min a seed here)")
    smol.add_argument("--seeds", type=int, nargs="+", help="the seeds to train (default: the scale's)")
    smol.add_argument("--export", default=None,
                      help="folder for the first seed's model (default: models/ctrl-smollm2 at cpu scale, else none; "
                           "'' for none)")
    smol.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    smol.set_defaults(handler=_train_smol)
    side = commands.add_parser(
        "compare", help="models/ctrl-demo and the SmolLM2 control-code model side by side -> results/ctrl_smollm2/",
        description="Every measure of study 04 on both models in bits per byte (lmstudy.ctrl.compare): each held-out "
                    "document under every code and none, attribution, controllability, the judged repetition "
                    "sweep, code-mixing and link probes (8 generations a cell); the SmolLM2 model's other training "
                    "seeds on the parts that rest on training. Resumable: a part already written is kept (--force "
                    "redoes). Once every part is measured, draws figures/04_smol_ctrl_* (summary, per-domain bits, "
                    "confusion matrix, the app's examples side by side); python -m lmstudy claims 04-smollm2 reads "
                    "the tables.",
    )
    side.add_argument("--models", nargs="+", help="labels: ctrl-demo ctrl-smollm2 ctrl-smollm2/seed-N (default: all)")
    side.add_argument("--parts", nargs="+", help="bits controllability quality mixing links (default: all)")
    side.add_argument("--eval-docs", type=int, default=20, help="held-out documents a code (default 20)")
    side.add_argument("--max-chars", type=int, default=500, help="characters of each document scored (default 500)")
    side.add_argument("--force", action="store_true", help="measure again the parts already written")
    side.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    side.set_defaults(handler=_compare)
    quality = commands.add_parser(
        "quality", help="study 04's judged repetition sweep and Rating: probe -> figures/ (lmstudy.ctrl.quality)",
        description="Regenerate the repetition sweep of a control-code model (default: the demo checkpoint, the "
                    "from_base arm) with its texts, score every continuation with another model (default: SmolLM2, "
                    "bits per byte), and measure the secondary code Rating: (held-out reviews' loss under their "
                    "own and the opposite rating; generations under Rating: 5.0 and 1.0). Writes "
                    "04_control_codes_quality.csv and 04_control_codes_ratings.csv, which the claims of study 04 "
                    "read (python -m lmstudy claims 04).",
    )
    quality.add_argument("--model", default="models/ctrl-demo", help="the generator (a control-code model folder)")
    quality.add_argument("--judge", default="smollm2", help="the judging model (lmstudy.pretrained.load_pretrained)")
    quality.add_argument("--out", default=None, help="folder of the two tables (default: figures/)")
    quality.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    quality.set_defaults(handler=_quality)


def register(subparsers) -> None:
    """Add ``generate``, ``attribute`` and ``ctrl add-codes`` to the ``lmstudy`` command line."""
    generate = subparsers.add_parser(
        "generate", help="continue a prompt under one or more control codes (CTRL)",
        description="Generate from a control-code model, one column per code, in one batch with a fixed seed.",
    )
    generate.add_argument("--model", required=True, help="folder written by lmstudy.ctrl.model.save_control_model")
    generate.add_argument("--code", action="append", metavar="CODE",
                          help="control code (repeat or comma-separate; default: every code of the model). A value "
                               "with a space is one composite code: 'Reviews Rating: 5.0', or code-mixed "
                               "'r/Sports English:'")
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
    _register_ctrl(subparsers)


__all__ = ["register"]
