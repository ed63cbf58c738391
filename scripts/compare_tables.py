"""Compare the CSV tables of two folders: per file, the largest relative difference of any number and the row it
is in (text columns must match). For a rerun against a published run, e.g. notebook 03 run again from an empty
run cache with ``LMSTUDY_FIGURES=RERUN``:

    python scripts/compare_tables.py figures RERUN --glob "03_krony_*.csv"
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def compare(published: Path, rerun: Path) -> str:
    """One line: the file, whether its text columns agree, the largest relative difference and its row."""
    old, new = pd.read_csv(published), pd.read_csv(rerun)
    if old.shape != new.shape or list(old.columns) != list(new.columns):
        return f"{rerun.name}: different shape or columns ({old.shape} vs {new.shape})"
    numbers = old.select_dtypes("number").columns
    text = [column for column in old.columns if column not in numbers]
    text_equal = all((old[c].fillna("") == new[c].fillna("")).all() for c in text)
    relative = ((new[numbers] - old[numbers]).abs() / old[numbers].abs().clip(lower=1e-12)).max(axis=1)  # per row
    row = relative.idxmax()
    label = ", ".join(str(old.loc[row, c]) for c in text[:3] if pd.notna(old.loc[row, c]))
    return (f"{rerun.name}: text equal {text_equal}; largest relative difference {relative.max():.1e} (row {row}: "
            f"{label}); next largest row {relative.drop(row).max():.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("published", type=Path)
    parser.add_argument("rerun", type=Path)
    parser.add_argument("--glob", default="*.csv")
    args = parser.parse_args()
    for rerun in sorted(args.rerun.glob(args.glob)):
        print(compare(args.published / rerun.name, rerun))


if __name__ == "__main__":
    main()
