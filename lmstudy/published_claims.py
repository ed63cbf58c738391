"""The published claims tables: each study's verdicts rebuilt from committed results, never by training.

Every study module has a ``published_claims()`` that reads only what the repository keeps (the per-seed tables
in ``figures/``, the archived runs in ``results/runs``) and returns its :func:`lmstudy.claims.claims_table`. This
registry names them, with the file each one writes, so that ``python -m lmstudy claims`` rebuilds every table
(and prints the verdicts that changed against the file it replaces), and a test checks that the committed
tables are exactly what the rule gives today. The registry names modules as text: the core never imports a
paper's package except through this one entry.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lmstudy.claims import RULE, verdict_changes
from lmstudy.paths import figures_dir


@dataclass(frozen=True)
class PublishedTable:
    """One study's published claims table: ``function`` (``module:name``) builds it, ``filename`` in figures/."""

    study: str
    function: str
    filename: str
    title: str

    def build(self) -> pd.DataFrame:
        module, name = self.function.split(":")
        table = getattr(importlib.import_module(module), name)()
        if table.attrs.get("rule") != RULE:
            raise RuntimeError(f"{self.function} did not build its table with lmstudy.claims.claims_table")
        return table

    @property
    def path(self) -> Path:
        return figures_dir() / self.filename


PUBLISHED = {table.study: table for table in (
    PublishedTable("01", "lmstudy.welch.tables:published_claims", "01_embedding_init_claims.csv",
                   "Welch et al. 2020, Section 2-3 (tying, freezing, pretraining)"),
    PublishedTable("01-trend", "lmstudy.welch.trend:published_claims", "01_embedding_init_trend_claims.csv",
                   "Welch et al. 2020, freezing claims over training length"),
    PublishedTable("01b", "lmstudy.welch.extended:published_claims", "01b_claims.csv",
                   "Welch et al. 2020, Tables 2-7 and Figure 1"),
    PublishedTable("02", "lmstudy.entity.claims:published_claims", "02_entity_claims.csv",
                   "Stylianou & Vlahavas 2020, Entity-Transformers"),
    PublishedTable("02-smollm2", "lmstudy.entity.claims:published_smol_claims", "02_entity_smollm2_claims.csv",
                   "Stylianou & Vlahavas 2020, Entity-Transformers on SmolLM2-135M (top 4 layers)"),
    PublishedTable("03", "lmstudy.krony.claims:published_claims", "03_krony_claims.csv",
                   "Krony-PT 2024"),
    PublishedTable("03-smollm2", "lmstudy.krony.claims:published_smol_claims", "03_krony_smollm2_claims.csv",
                   "Krony-PT 2024 on SmolLM2-135M: Krony vs distilled vs vanilla, inits, Table 6"),
    PublishedTable("03-quality", "lmstudy.krony.quality_trend:published_claims", "03_krony_quality_claims.csv",
                   "Krony-PT 2024: Krony vs distilled against the base's quality (our base, GPU, SmolLM2)"),
    PublishedTable("04", "lmstudy.ctrl.claims:published_claims", "04_control_codes_claims.csv",
                   "Keskar et al. 2019, CTRL"),
    PublishedTable("04-smollm2", "lmstudy.ctrl.compare_claims:published_claims", "04_smol_ctrl_claims.csv",
                   "Keskar et al. 2019, CTRL: SmolLM2 + codes beside the demo model"),
)}


def rebuild(study: str, write: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build ``study``'s table; returns it and the verdicts that changed against the file on disk (old, new).
    ``write``: replace the file."""
    if study not in PUBLISHED:
        raise KeyError(f"unknown study {study!r}: one of {', '.join(PUBLISHED)}")
    published = PUBLISHED[study]
    table = published.build()
    keys = [key for key in ("claim", "dataset", "level") if key in table]
    old = pd.read_csv(published.path) if published.path.exists() else table.iloc[0:0]
    changes = verdict_changes(old, table, keys) if "verdict" in old else table[keys].assign(old=None,
                                                                                            new=table["verdict"])
    if write:
        table.to_csv(published.path, index=False)
    return table, changes


def register(subparsers) -> None:
    """Add ``claims [STUDY ...] [--check]`` to the ``lmstudy`` command line."""
    parser = subparsers.add_parser(
        "claims", help="rebuild the published claims tables from committed results (no training)",
        description="Rebuild each study's claims table (lmstudy/published_claims.py) through lmstudy.claims' rule "
        "from the committed per-seed tables and archived runs, write it to figures/, and print the verdicts that "
        "changed against the file it replaces.")
    parser.add_argument("studies", nargs="*", metavar="STUDY", help=f"some of {', '.join(PUBLISHED)} (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed table differs from what the rule gives")
    parser.set_defaults(handler=_run_claims)


def _run_claims(args: argparse.Namespace) -> int:
    stale = []
    for study in args.studies or list(PUBLISHED):
        table, changes = rebuild(study, write=not args.check)
        published = PUBLISHED[study]
        print(f"{study}: {published.title}: {len(table)} claims -> figures/{published.filename}")
        print(table["verdict"].value_counts().to_string())
        if len(changes):
            stale.append(study)
            print(f"verdicts changed against the previous file ({len(changes)}):")
            print(changes.to_string(index=False))
        print()
    if args.check and stale:
        print(f"stale tables: {', '.join(stale)} (run python -m lmstudy claims {' '.join(stale)})")
        return 1
    return 0


__all__ = ["PUBLISHED", "PublishedTable", "rebuild", "register"]
