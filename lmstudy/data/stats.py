"""Rare-word statistics of our splits beside Welch et al. (2020) Table 4: ``python -m lmstudy data stats``.

For each domain: the percentage of word types and tokens occurring five times or fewer in the LM
training split ("Train"), in the pretraining split ("Pretrain"), and the percentage of training
types/tokens that occur five times or fewer in the pretraining split ("Train in Pre"), computed by
:func:`lmstudy.text.rare_word_stats` on the normalised token caches of :mod:`lmstudy.data.splits`
(``<eos>`` and ``<unk>`` are not words and are not counted).

Output: ``figures/rare_words.csv`` (tidy: one row per dataset, ``source`` = ours or the paper) and
``figures/rare_words.md`` (the same as a Markdown table, with notes). The first run builds the token
caches of every domain (all pretraining data is normalised once: tens of minutes on a laptop);
later runs only count. The command itself is in :mod:`lmstudy.data.cli`.
"""

from __future__ import annotations

from dataclasses import asdict, fields

import pandas as pd

from lmstudy.paths import figures_dir
from lmstudy.runs import atomic_write_text
from lmstudy.text import RareWordStats, rare_word_stats

OURS = "lmstudy"
PAPER = "Welch et al. 2020, Table 4"

# Welch et al. (2020) Table 4: Train type/tok, Pretrain type/tok, Train-in-Pre type/tok (percent).
PAPER_TABLE_4: dict[str, tuple[float, float, float, float, float, float]] = {
    "PTB": (73, 5.3, 77, 0.11, 14, 1.3),
    "NANC": (71, 4.8, 63, 0.49, 13, 0.63),
    "Sci": (78, 6.3, 85, 1.2, 23, 1.6),
    "IRC": (83, 4.2, 90, 1.3, 37, 1.4),
    "Reddit": (81, 6.1, 86, 0.69, 15, 0.71),
    "Wiki": (78, 7.3, 78, 0.36, 5.6, 0.43),
}
# Our domains in table order, with the paper row each one is comparable to.
DOMAIN_ROWS = {"ptb": "PTB", "news": "NANC", "irc": "IRC", "reddit": "Reddit", "wikipedia": "Wiki",
               "imdb": None, "books": None}
STAT_COLUMNS = [f.name for f in fields(RareWordStats)]

NOTES = """\
Percent of word types / tokens occurring at most {threshold} times in the LM training split (Train),
in the pretraining split (Pretrain), and of training types / tokens occurring at most {threshold} times
in the pretraining split (Train in Pre). Tokens after `lmstudy.text.normalise_ptb`; `<eos>`, `<unk>`
not counted. Splits: `lmstudy/data/splits/*.json`. Command: `python -m lmstudy data stats`.

- Our PTB is Mikolov's (already UNK'd to a 10k vocabulary: every kept word occurs several times, and
  45k tokens are `<unk>`), so its Train columns are not comparable with the paper's PTB row, which
  counts the PTB text without UNK replacement. Our PTB pretraining data is our `news` pretraining
  split (Reuters-21578 + BBC News), not Gigaword (about 5B tokens) as in the paper.
- Paper rows to compare with: news ~ NANC (Wall Street Journal text in the paper), irc ~ IRC,
  reddit ~ Reddit, wikipedia ~ Wiki; Sci (CORD-19) has no counterpart here, and the paper has no
  IMDB or books domain. The paper's pretraining sets have 43M (NANC) to 2.2B (Wiki) tokens; ours
  have {smallest_pretrain:,} to {largest_pretrain:,}, so more words stay rare in them (the Pretrain
  and Train in Pre columns).
"""


def rare_word_table(domains: list[str] | None = None, threshold: int = 5) -> pd.DataFrame:
    """One row per dataset: ours (``source`` = lmstudy) then the paper's Table 4 rows. Builds the
    token caches of the domains on first use."""
    from lmstudy.data.parts import split_counts, token_file
    from lmstudy.data.splits import load_split

    domains = list(DOMAIN_ROWS) if domains is None else domains
    pretrain_counts: dict = {}  # token file -> counts: PTB's pretraining file is news's, count it once
    rows = []
    for domain in domains:
        pretrain_file = token_file(domain, "pretrain")
        if pretrain_file not in pretrain_counts:
            pretrain_counts[pretrain_file] = split_counts(domain, "pretrain")
        stats = rare_word_stats(split_counts(domain, "train"), pretrain_counts[pretrain_file], threshold)
        split = load_split(domain)
        rows.append({"dataset": domain, "source": OURS, **asdict(stats),
                     "train_tokens": split.tokens["train"], "pretrain_tokens": split.tokens["pretrain"],
                     "paper_row": DOMAIN_ROWS.get(domain)})
    for name, values in PAPER_TABLE_4.items():
        rows.append({"dataset": name, "source": PAPER, **dict(zip(STAT_COLUMNS, values)),
                     "train_tokens": None, "pretrain_tokens": None, "paper_row": name})
    table = pd.DataFrame(rows)
    size_columns = ["train_tokens", "pretrain_tokens"]
    table[size_columns] = table[size_columns].astype("Int64")  # integers with gaps, not floats
    return table


def _markdown(table: pd.DataFrame, threshold: int) -> str:
    header = ["dataset", "source", "Train type", "Train tok", "Pretrain type", "Pretrain tok",
              "Train in Pre type", "Train in Pre tok", "train tokens", "pretrain tokens"]
    lines = ["# Rare words (Welch et al. 2020, Table 4)", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    for row in table.itertuples(index=False):
        cells = [row.dataset, row.source] + [f"{getattr(row, name):.3g}" for name in STAT_COLUMNS]
        sizes = (row.train_tokens, row.pretrain_tokens)
        cells += ["" if pd.isna(value) else f"{int(value):,}" for value in sizes]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = table.pretrain_tokens.dropna()
    notes = NOTES.format(threshold=threshold, smallest_pretrain=int(sizes.min()),
                         largest_pretrain=int(sizes.max()))
    return "\n".join(lines) + "\n\n" + notes


def write_rare_word_table(domains: list[str] | None = None, threshold: int = 5) -> pd.DataFrame:
    """Compute the table and write ``figures/rare_words.csv`` and ``figures/rare_words.md``."""
    table = rare_word_table(domains, threshold)
    folder = figures_dir()
    atomic_write_text(folder / "rare_words.csv", table.to_csv(index=False, float_format="%.4g"))
    atomic_write_text(folder / "rare_words.md", _markdown(table, threshold))
    return table


__all__ = ["PAPER_TABLE_4", "rare_word_table", "write_rare_word_table"]
