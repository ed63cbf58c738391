"""``lmstudy data list | verify | fetch | add``: the corpus catalogue on the command line.

``register(subparsers)`` adds the four subcommands to the ``data`` command's subparsers; each sets
``handler`` (a function ``args -> exit code``) as the parser default, which ``lmstudy.__main__`` calls.
``main(argv)`` runs them without ``__main__`` (tests, scripts): ``main(["verify", "ptb"])``.

- ``data list [-v] [--no-count]``: one row per corpus: size on disk (MiB), word count computed here
  (cached; the first run counts every corpus, about a minute or two) beside MANIFEST.md's figure, the
  unit, whether they agree, present/missing, licence. ``-v`` adds the full licence, origin and counting
  rule with the count per part. ``--no-count`` shows only counts already cached. Then the registered user
  corpora (``data add``) with their parts' token counts.
- ``data verify [NAMES...]``: sha256 of every file; exit 1 naming each missing or damaged file with its
  expected hash and the command that fixes it; exit 0 with one summary line when all is well.
- ``data fetch NAME... [--base-url URL] [--dest DIR]``: download (see :mod:`lmstudy.data.fetch`).
- ``data add NAME PATH [--text-column COL] [--unwrap] [--train-tokens N] [--force]``: register your own
  corpus as a domain with fixed splits (see :mod:`lmstudy.data.add_corpus`); exit 1 with a one-line error
  and nothing written when it cannot be registered.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lmstudy.data.catalogue import (
    CATALOGUE,
    UnknownCorpusError,
    cached_word_count,
    corpus_present,
    count_words,
    count_words_by_part,
    folder_size,
    get_corpus,
    verify,
)
from lmstudy.data.user_corpus import corpus_info, registered_corpora
from lmstudy.paths import data_dir, figures_dir, user_data_dir

LICENCE_WIDTH = 60  # the table truncates long licence statements; `data list -v` prints them whole


def register(subparsers) -> None:
    """Add ``list``, ``verify``, ``fetch``, ``add`` and ``stats`` to the ``data`` command's subparsers."""
    listing = subparsers.add_parser("list", help="corpora: size, word counts vs MANIFEST.md, licence, presence")
    listing.add_argument("-v", "--verbose", action="store_true",
                         help="also print full licence, origin, counting rule and per-part counts")
    listing.add_argument("--no-count", action="store_true", help="show cached word counts only; count nothing")
    listing.set_defaults(handler=run_list)

    verifying = subparsers.add_parser("verify", help="check the sha256 of every corpus file")
    verifying.add_argument("names", nargs="*", metavar="NAME", help="corpora to check (default: all)")
    verifying.set_defaults(handler=run_verify)

    fetching = subparsers.add_parser("fetch", help="download corpora from their sources or a mirror")
    fetching.add_argument("names", nargs="+", metavar="NAME", help="corpus names (see `data list`)")
    fetching.add_argument("--base-url", default=None,
                          help="mirror serving <corpus>/<file> (default: $LMSTUDY_FETCH_BASE_URL, else the origins)")
    fetching.add_argument("--dest", type=Path, default=None, help="data directory to fill (default: $LMSTUDY_DATA)")
    fetching.set_defaults(handler=run_fetch)

    adding = subparsers.add_parser(
        "add", help="register your own corpus (.txt folder, .jsonl, .csv, datasets folder) as a domain",
        description="Register PATH as user corpus NAME: copy its documents, normalise them as the bundled domains "
        "are, split them into train/valid/test/pretrain with the same code (near-duplicates kept in one part) and "
        "store it under $LMSTUDY_USER_DATA/NAME (default: user_data/ in the checkout). Then NAME works wherever a "
        "domain does, e.g. python -m lmstudy study 01b_embedding_init_extended --scale cpu -p domain NAME. "
        "Minimum size: the split targets plus a pretraining part as large as train (1,924,101 tokens by default). "
        "Nothing is written when it fails.")
    adding.add_argument("name", help="the corpus name: lower-case letters, digits, '_', '-' (not a bundled name)")
    adding.add_argument("path", type=Path, help="a folder of .txt files (one document each), a .jsonl or .csv file "
                        "(one document a row), or a Hugging Face datasets folder (save_to_disk)")
    adding.add_argument("--text-column", default=None,
                        help="the text's column in a .jsonl, .csv or datasets folder (default: text)")
    adding.add_argument("--unwrap", action="store_true",
                        help="join the lines of each blank-line separated paragraph (hard-wrapped prose)")
    adding.add_argument("--train-tokens", type=int, default=887_521,
                        help="the train part's target in tokens; valid and test scale with it (default: PTB's "
                        "887,521, with valid 70,390 and test 78,669)")
    adding.add_argument("--force", action="store_true", help="replace a registered corpus of the same name")
    adding.set_defaults(handler=run_add)
    stats = subparsers.add_parser(
        "stats", help="rare-word statistics of the splits (Welch et al. Table 4) -> figures/rare_words.*",
        description="Rare-word statistics of our splits beside Welch et al. (2020) Table 4 (lmstudy.data.stats).",
    )
    stats.add_argument("domains", nargs="*", help="domains (default: all with splits)")
    stats.add_argument("--threshold", type=int, default=5, help="rare = occurs at most this often (5)")
    stats.set_defaults(handler=run_stats)


def main(argv: list[str] | None = None) -> int:
    """Run one ``data`` subcommand; returns the exit code."""
    parser = argparse.ArgumentParser(prog="lmstudy data", description=__doc__.split("\n\n")[0])
    register(parser.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND"))
    args = parser.parse_args(argv)
    return args.handler(args)


def _error(message: str, code: int) -> int:
    print(f"lmstudy data: error: {message}", file=sys.stderr)
    return code


def _format_count(count: int | None) -> str:
    return "-" if count is None else f"{count:,}"


def run_list(args) -> int:
    """``data list``: print the corpus table (``-v``: each corpus' details and counts per part); returns 0."""
    rows = []
    for corpus in CATALOGUE.values():
        present = corpus_present(corpus)
        if not present:
            count = None
        elif args.no_count:
            count = cached_word_count(corpus)
        else:
            count = count_words(corpus)
        agreement = "" if count is None else ("=" if count == corpus.manifest_words else "DIFFERS")
        licence = corpus.licence if len(corpus.licence) <= LICENCE_WIDTH else corpus.licence[:LICENCE_WIDTH - 1] + "…"
        rows.append([corpus.name, f"{folder_size(corpus) / 2**20:.2f}", _format_count(count),
                     f"{corpus.manifest_words:,}", agreement, corpus.word_unit,
                     "present" if present else "missing", licence])
    header = ["corpus", "MiB", "words (counted)", "MANIFEST.md", "", "unit", "status", "licence"]
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    right_aligned = {1, 2, 3}
    print(f"data directory: {data_dir()}")
    for row in [header] + rows:
        cells = [cell.rjust(w) if i in right_aligned else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
    _print_user_corpora()
    if args.verbose:
        for corpus in CATALOGUE.values():
            print(f"\n{corpus.name}: {corpus.description}\n  licence: {corpus.licence}\n  origin: {corpus.origin}"
                  f"\n  counted: {corpus.word_rule}")
            parts = count_words_by_part(corpus, compute=not args.no_count) if corpus_present(corpus) else None
            for part, count in (parts or {}).items():
                print(f"    {part}: {count:,}")
    return 0


def _print_user_corpora() -> None:
    """The registered user corpora: documents, tokens of each part, format and source."""
    names = registered_corpora()
    if not names:
        print(f"\nuser corpora: none under {user_data_dir()} (add one with: python -m lmstudy data add NAME PATH)")
        return
    from lmstudy.data.splits import load_split

    print(f"\nuser corpora under {user_data_dir()} (tokens after normalisation, <eos> included):")
    header = ["corpus", "documents", "train", "valid", "test", "pretrain", "format", "source"]
    rows = []
    for name in names:
        info, split = corpus_info(name), load_split(name)
        rows.append([name, f"{sum(split.documents.values()):,}",
                     *(f"{split.tokens[part]:,}" for part in ("train", "valid", "test", "pretrain")),
                     info.format, info.source])
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        cells = [cell.rjust(w) if 1 <= i <= 5 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


def run_verify(args) -> int:
    """``data verify``: check every data file's sha256; returns 0, 1 naming each problem, 2 for an unknown corpus."""
    try:
        names = [get_corpus(name).name for name in args.names]
    except UnknownCorpusError as error:
        return _error(str(error), 2)
    corpora = names or list(CATALOGUE)
    started = time.perf_counter()
    problems = verify(names or None)
    if problems:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem(s) in {len({p.corpus for p in problems})} corpus(es) under {data_dir()}")
        return 1
    files = sum(len(get_corpus(name).files) for name in corpora)
    print(f"ok: all {files} data files of {len(corpora)} corpora ({', '.join(corpora) if names else 'all'}) "
          f"match their sha256 under {data_dir()} ({time.perf_counter() - started:.1f} s)")
    return 0


def run_fetch(args) -> int:
    """``data fetch``: download each named corpus; returns 0, 1 when a download fails, 2 for an unknown corpus."""
    from lmstudy.data.fetch import FetchError, fetch  # urllib & co. only when fetching

    try:
        corpora = [get_corpus(name) for name in args.names]
    except UnknownCorpusError as error:
        return _error(str(error), 2)
    for corpus in corpora:
        try:
            folder = fetch(corpus, dest_root=args.dest, base_url=args.base_url)
        except (FetchError, OSError) as error:
            return _error(str(error), 1)
        print(f"{corpus.name}: ok ({folder})")
    return 0


def run_add(args) -> int:
    """``data add``: register a user corpus; returns 0, or 1 with a one-line error (nothing written)."""
    from lmstudy.data.add_corpus import CorpusError, add_corpus

    started = time.perf_counter()
    try:
        registration = add_corpus(args.name, args.path, text_column=args.text_column, force=args.force,
                                  train_tokens=args.train_tokens, unwrap=args.unwrap)
    except CorpusError as error:
        return _error(str(error), 1)
    info, split = registration.info, registration.split
    dropped = len(split.dropped)
    print(f"registered {info.name!r} ({info.format}, {info.documents_read:,} documents, {info.words_read:,} words) "
          f"in {registration.folder} ({time.perf_counter() - started:.1f} s)")
    print(f"split (tokens after normalisation, <eos> included; {dropped:,} documents dropped as duplicates or empty, "
          f"{split.dedup['clusters_of_several']:,} near-duplicate clusters kept whole):")
    for part in ("train", "valid", "test", "pretrain"):
        print(f"  {part:<8} {split.tokens[part]:>12,} tokens  {split.documents[part]:>9,} documents")
    for run in registration.stale_runs:
        print(f"warning: cached run {run} was trained on the replaced {info.name!r} and would be reused: delete it")
    print(f"use it: python -m lmstudy study 01b_embedding_init_extended --scale cpu -p domain {info.name}")
    return 0


def run_stats(args) -> int:
    """``data stats``: the rare-word table (:mod:`lmstudy.data.stats`) into ``figures/``, printed."""
    import pandas as pd

    from lmstudy.data.stats import write_rare_word_table

    started = time.perf_counter()
    table = write_rare_word_table(args.domains or None, args.threshold)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(table.drop(columns=["paper_row"]).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    seconds = time.perf_counter() - started
    print(f"wrote {figures_dir() / 'rare_words.csv'} and rare_words.md in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
