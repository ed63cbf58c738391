"""The ``lmstudy krony`` commands: ``krony table`` prints the paper's parameter Tables 1 and 2; ``krony scratch``
trains notebook 03's equal-data scratch model in a process of its own."""

from __future__ import annotations

STUDY_NOTEBOOK = "03_kronecker"


def register(subparsers) -> None:
    """Add ``krony table`` and ``krony scratch`` to the ``lmstudy`` command line."""
    from lmstudy.scales import SCALES

    krony = subparsers.add_parser("krony", help="Krony-PT (Kronecker-factored GPT-2 MLPs) tools")
    krony_commands = krony.add_subparsers(dest="krony_command", required=True, metavar="SUBCOMMAND")
    table = krony_commands.add_parser(
        "table", help="the paper's parameter Tables 1 and 2, recomputed from the GPT-2 small config",
        description="Every row of Krony-PT Table 1 and the multi-factor rows of Table 2, beside the paper's numbers.",
    )
    table.set_defaults(handler=print_table)
    scratch = krony_commands.add_parser(
        "scratch", help="train notebook 03's equal-data scratch model on its own, beside the study",
        description="Pretrain the dense model of the compared class's size from random weights with the shared "
        "base's recipe (notebook 03's 'scratch, equal data' arm; a second base pretraining, the study's longest "
        "stage) in this process, then the arm's continued training from each of the base's checkpoints and seeds, "
        "highest checkpoint first. Started beside `lmstudy study 03_kronecker` with the same scale and -p values, "
        "it runs while the study trains its other models (which leaves these for last, lowest checkpoint first, so "
        "the two meet); the study reads them back from the run cache, or waits for one (the run's lock) if it gets "
        "there first. Resumable like every run.",
    )
    scratch.add_argument("--scale", choices=SCALES, default="cpu")
    scratch.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                         help="a notebook 03 parameter, as for `lmstudy study` (the scratch model depends on "
                         "base_scale, base_overrides and compare_class)")
    scratch.set_defaults(handler=train_scratch)


def print_table(args) -> int:
    """``lmstudy krony table``."""
    # Imported here: the Kronecker code needs torch and transformers, which `--help` should not wait for.
    from lmstudy.krony.table import format_table

    print(format_table())
    return 0


def train_scratch(args) -> int:
    """``lmstudy krony scratch``: the study's ``scratch_pretraining`` with the notebook's preset plus ``-p``, then
    its continued training (``scratch_arm_runs``)."""
    from dataclasses import fields

    from lmstudy.krony.study import KronyConfig, scratch_arm_runs, scratch_pretraining
    from lmstudy.notebook_runner import parse_overrides
    from lmstudy.scales import preset

    overrides = parse_overrides(args.parameter)
    known = {f.name for f in fields(KronyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:  # lmstudy.__main__ prints a ValueError as one line
        raise ValueError(f"not a notebook 03 parameter: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    config = KronyConfig(**{**preset(STUDY_NOTEBOOK, args.scale), **overrides})
    metrics = scratch_pretraining(config)
    print(f"scratch, equal data ({args.scale}): {metrics['steps']:,} steps, {metrics['tokens']:,} tokens, "
          f"{metrics['parameters']:,} parameters, final validation loss {metrics['val_loss']:.4f}")
    scratch_arm_runs(config, highest_first=True)
    return 0
