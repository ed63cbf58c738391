"""``python -m lmstudy base sweep|train|export --scale S``: the shared base models (:mod:`lmstudy.base`; the sweep:
:mod:`lmstudy.base_sweep`).

Kept apart from :mod:`lmstudy.base` so that ``--help`` does not wait for torch and transformers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path


def _parse_size(text: str):
    from lmstudy.base import BaseModelConfig

    try:
        n_layer, n_head, n_embd = (int(part) for part in text.lower().replace("x", ",").split(","))
    except ValueError:
        raise ValueError(f"--size {text!r} must be N_LAYER,N_HEAD,N_EMBD, e.g. 4,4,256") from None
    if n_embd % n_head:
        raise ValueError(f"--size {text!r}: the width {n_embd} must be a multiple of the heads {n_head}")
    return BaseModelConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd)


def _parse_overrides(text: str | None) -> dict:
    """``--overrides "{compute: 1.0e+16, data: {data_fraction: 0.1}}"`` -> a dict of base preset changes, read as
    a study's ``-p base_overrides`` value is (so the same text names the same base run in both places)."""
    from lmstudy.notebook_runner import parse_value

    if not text:
        return {}
    value = parse_value(text)
    if not isinstance(value, dict):
        raise ValueError(f"--overrides {text!r} must be a mapping, e.g. \"{{compute: 1.0e+16, compile: false}}\"")
    return value


def _final(args):
    from lmstudy.base import STUDY, final_config
    from lmstudy.scales import preset

    overrides = _parse_overrides(args.overrides)
    if args.size is None:
        return final_config(args.scale, **overrides)
    seq_len = preset(STUDY, args.scale)["model"]["seq_len"]
    return final_config(args.scale, model=replace(_parse_size(args.size), seq_len=seq_len), **overrides)


def _sweep_command(args) -> int:
    from lmstudy.base_sweep import choose_size, plot_sweep, run_sweep
    from lmstudy.paths import figures_dir

    curves, summary = run_sweep(args.scale)
    chosen = choose_size(summary)
    folder = figures_dir(args.scale)
    summary.assign(chosen=summary["size"] == chosen["size"]).to_csv(folder / "base_sweep.csv", index=False)
    curves.to_csv(folder / "base_sweep_curves.csv", index=False)
    plot_sweep(curves, summary, chosen["size"]).savefig(folder / "base_sweep.png", dpi=120)
    print(summary.to_string(index=False))
    print(f"chosen: {chosen['size']} ({chosen['final_tokens_per_parameter']:.1f} tokens per parameter at the final "
          f"compute, the nearest to 20 among the sizes that fit the 40 MB budget); figures in {folder}/base_sweep.*")
    return 0


def _train_command(args) -> int:
    from lmstudy.base import base_run, size_label, train_base

    config = _final(args)
    print(f"training base {size_label(config.model)}: {config.train_tokens:,} tokens, {config.max_steps:,} steps "
          f"(resumes from its last checkpoint; run folder {base_run(config).path})")
    metrics = train_base(config)
    print(json.dumps({k: metrics[k] for k in ("steps", "tokens", "val_loss", "train_wall_s", "parameters")}, indent=1))
    return 0


def _export_command(args) -> int:
    from lmstudy.base import export_base, plot_loss_curve
    from lmstudy.paths import figures_dir, models_dir

    config = _final(args)
    evaluate = None if args.no_eval else _protocol_for_card(args)
    paths = export_base(config, Path(args.dest) if args.dest else models_dir(args.scale), args.scale, evaluate,
                        force=args.force)
    plot_loss_curve(config).savefig(figures_dir(args.scale) / "base_loss.png", dpi=120)
    for path in paths:
        print(f"exported {path}")
    return 0


def _protocol_for_card(args):
    """The evaluation protocol (lmstudy.evaluation) as the export's ``evaluate``: full WikiText-2 test, all
    LAMBADA passages, ``--domain-docs`` test documents of each domain."""
    from lmstudy.evaluation import EvalConfig, evaluate_model

    def evaluate(model, tokenizer):
        table = evaluate_model(model, tokenizer, EvalConfig(domain_documents=args.domain_docs,
                                                            lambada_examples=args.lambada))
        return table.to_dict("records")

    return evaluate


def register(subparsers) -> None:
    """Add ``base sweep | train | export`` to the ``lmstudy`` command line."""
    from lmstudy.scales import SCALES

    base = subparsers.add_parser("base", help="the shared base models: sweep, train, export (lmstudy.base)",
                                 description="The shared base models: one BPE and one small GPT-2 pretrained "
                                 "once on every domain's pretraining text (lmstudy/base.py).")
    commands = base.add_subparsers(dest="base_command", required=True, metavar="SUBCOMMAND")
    for name, handler, text in (
        ("sweep", _sweep_command, "train each sweep size with equal compute; figure and chosen size"),
        ("train", _train_command, "train the final base (cached; resumes after a kill)"),
        ("export", _export_command, "Hugging Face folders of the kept checkpoints, model cards, loss curve"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("--scale", choices=SCALES, default="smoke")
        if name != "sweep":
            command.add_argument("--size", default=None, metavar="L,H,D",
                                 help="layers,heads,width (default: the scale preset's model)")
            command.add_argument("--overrides", default=None, metavar="YAML",
                                 help="changes to the scale's base preset (lmstudy/scales.py \"base\"), as a study's "
                                 "-p base_overrides takes them, e.g. \"{compute: 1.0e+16, data: {data_fraction: 0.1}}\"")
        if name == "export":
            command.add_argument("--dest", default=None, help="folder for the model folders (default: models/)")
            command.add_argument("--no-eval", action="store_true", help="skip the evaluation protocol in the cards")
            command.add_argument("--force", action="store_true",
                                 help="export again folders already exported from the same checkpoint")
            command.add_argument("--domain-docs", type=int, default=50, help="test documents per domain (default 50)")
            command.add_argument("--lambada", type=int, default=0, help="LAMBADA passages (default 0 = all 5,153)")
        command.set_defaults(handler=handler)
