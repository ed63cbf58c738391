"""``python -m lmstudy hpsearch``: the command line of :mod:`lmstudy.welch.hpsearch` (Welch Figure 1's search).

Apart from the search so that building the ``lmstudy`` parser does not import Optuna, pandas and seaborn: every
command would pay for them, not only this one.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """``python -m lmstudy hpsearch --scale cpu [--n-trials N] [--storage URL] [--study-name NAME]``."""
    parser = subparsers.add_parser(
        "hpsearch", help="Welch Figure 1: random hyperparameter search, baseline vs ours (Optuna)",
        description="Run, resume or join (several workers on one --storage) the random search of notebook "
        "01b at a scale; prints the per-trial table and the expected validation performance.")
    parser.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="smoke")
    parser.add_argument("--n-trials", type=int, default=None, help="total samples of the study (default: preset)")
    parser.add_argument("--storage", default="",
                        help="Optuna RDB URL (default: sqlite:///runs/optuna.db); several workers share a study "
                        "with postgresql://USER:PASSWORD@HOST/DB (needs: pip install 'lmstudy[postgres]')")
    parser.add_argument("--study-name", default="", help="default: welch-fig1-SCALE-<hash of the settings>")
    parser.add_argument("--seed", type=int, default=None)
    parser.set_defaults(handler=_cli)


def _cli(args: argparse.Namespace) -> int:
    from lmstudy.welch.hpsearch import evp_table, run_search, search_config, search_table

    config = search_config(args.scale, args.n_trials, args.storage, args.study_name, args.seed)
    table = search_table(run_search(config))
    print(table.to_string(index=False))
    print(evp_table(table).to_string(index=False))
    return 0
