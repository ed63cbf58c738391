"""The ``lmstudy krony`` commands: ``krony table`` prints the paper's parameter Tables 1 and 2; ``krony baselines``
trains notebook 03's dense baselines (the distilled and the equal-data scratch models) in a process of its own."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add ``krony table`` and ``krony baselines`` to the ``lmstudy`` command line."""
    from lmstudy.scales import SCALES

    krony = subparsers.add_parser("krony", help="Krony-PT (Kronecker-factored GPT-2 MLPs) tools")
    krony_commands = krony.add_subparsers(dest="krony_command", required=True, metavar="SUBCOMMAND")
    table = krony_commands.add_parser(
        "table", help="the paper's parameter Tables 1 and 2, recomputed from the GPT-2 small config",
        description="Every row of Krony-PT Table 1 and the multi-factor rows of Table 2, beside the paper's numbers.",
    )
    table.set_defaults(handler=print_table)
    baselines = krony_commands.add_parser(
        "baselines", help="train notebook 03's dense baselines in a second process, beside the study",
        description="Train notebook 03's dense baselines of the compared class's size, the distilled and the "
        "equal-data scratch models, from every checkpoint of the base and every seed: the study's list of them "
        "taken from its other end (lmstudy.krony.study.baseline_runs), the scratch arm's pretraining (a second base "
        "pretraining, the study's longest run) first unless the run cache has it. Started beside `lmstudy study "
        "03_kronecker` with the same scale and -p values, it trains while the study trains its Krony models; the "
        "two meet in the list, the study reading back what this process trained (or waiting for the run it is "
        "training, through the run's lock). Resumable like every run.",
    )
    baselines.add_argument("--scale", choices=SCALES, default="cpu")
    baselines.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                           help="a notebook 03 parameter, as for `lmstudy study` (give the study's)")
    baselines.add_argument("--pretraining-only", action="store_true",
                           help="train the scratch arm's pretraining alone: it needs no base, so on a GPU with room "
                                "for both it trains beside `lmstudy base train` (scripts/gpu_paper_runs.sh)")
    baselines.set_defaults(handler=train_baselines)


def print_table(args) -> int:
    """``lmstudy krony table``."""
    # Imported here: the Kronecker code needs torch and transformers, which `--help` should not wait for.
    from lmstudy.krony.table import format_table

    print(format_table())
    return 0


def study_config(scale: str, parameters: list[tuple[str, str]]):
    """Notebook 03's config at ``scale`` with ``-p KEY VALUE`` pairs, as ``lmstudy study 03_kronecker`` gives its
    parameters cell; a ValueError names a key that is not a parameter (``lmstudy.__main__`` prints it as one line)."""
    from dataclasses import fields

    from lmstudy.krony.study import STUDY_NOTEBOOK, KronyConfig
    from lmstudy.notebook_runner import parse_overrides
    from lmstudy.scales import preset

    overrides = parse_overrides(parameters)
    known = {f.name for f in fields(KronyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"not a notebook 03 parameter: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return KronyConfig(**{**preset(STUDY_NOTEBOOK, scale), **overrides})


def train_baselines(args) -> int:
    """``lmstudy krony baselines``: the scratch arm's pretraining, then (unless ``--pretraining-only``) the study's
    ``baseline_runs`` from the other end, with the notebook's preset plus ``-p``."""
    from lmstudy.krony.study import baseline_runs, scratch_pretraining

    config = study_config(args.scale, args.parameter)
    metrics = scratch_pretraining(config)
    print(f"scratch, equal data ({args.scale}): {metrics['steps']:,} steps, {metrics['tokens']:,} tokens, "
          f"{metrics['parameters']:,} parameters, final validation loss {metrics['val_loss']:.4f}")
    if not args.pretraining_only:  # the continued runs read the base's checkpoints
        baseline_runs(config, from_the_end=True)
    return 0
