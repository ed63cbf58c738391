"""The ``lmstudy krony`` commands: ``krony table`` prints the paper's parameter Tables 1 and 2 (``--model smollm2``: the
size classes of a Llama at the paper's ratios); ``krony smol`` runs the SmolLM2 comparison; ``krony scratch``
trains notebook 03's scratch-arm pretraining alone (it needs no trained base, so on a GPU it trains beside the base's
own pretraining: scripts/gpu_paper_runs.sh). The dense baselines beside the study: ``lmstudy study 03_kronecker
--second-worker``."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add ``krony table``, ``krony smol`` and ``krony scratch`` to the ``lmstudy`` command line."""
    from lmstudy.scales import SCALES

    krony = subparsers.add_parser("krony", help="Krony-PT (Kronecker-factored GPT-2 MLPs) tools")
    krony_commands = krony.add_subparsers(dest="krony_command", required=True, metavar="SUBCOMMAND")
    table = krony_commands.add_parser(
        "table", help="the paper's parameter Tables 1 and 2, recomputed from the GPT-2 small config",
        description="Every row of Krony-PT Table 1 and the multi-factor rows of Table 2, beside the paper's numbers.",
    )
    table.add_argument("--model", default="", help="a Llama-family model (e.g. smollm2, fetched): its size classes at "
                       "the paper's three ratios instead (lmstudy.krony.llama)")
    table.set_defaults(handler=print_table)
    scratch = krony_commands.add_parser(
        "scratch", help="train notebook 03's scratch-arm pretraining alone (beside the base's, on a GPU)",
        description="Train the dense model of notebook 03's equal-data arm from random init with the shared base's "
        "recipe (a second base pretraining, the study's longest run; lmstudy.krony.baselines.scratch_pretraining). "
        "It needs the base's data run, not the trained base, so it can train beside `lmstudy base train`; the study "
        "reads it back from the run cache. Give the study's -p values. Resumable like every run.",
    )
    scratch.add_argument("--scale", choices=SCALES, default="cpu")
    scratch.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                         help="a notebook 03 parameter, as for `lmstudy study` (give the study's)")
    scratch.set_defaults(handler=train_scratch)
    smol = krony_commands.add_parser(
        "smol", help="Krony-PT on SmolLM2: compressed vs distilled vs narrowed (issue 49)",
        description="Compress the fetched SmolLM2's MLPs at the paper's size classes and compare them, after the same "
        "continued training, with a distilled and a narrowed dense model of the same size (lmstudy.krony.smol). "
        "Resumable: every model is a cached run. Writes results/krony_smollm2/<part>.csv.",
    )
    smol.add_argument("--scale", choices=["smoke", "cpu"], default="cpu")
    smol.add_argument("--parts", nargs="+", choices=SMOL_PARTS, default=["central"],
                      help="compressed: every class x init straight after compression (no training); central: the "
                      "compare class's Krony inits, distilled and narrowed, seed 0, then the init chosen on validation "
                      "and both dense models on the other seeds; grid: every class's inits and dense models after "
                      "training, seed 0; table6: one vs several factors, with and without "
                      "scalars; trend: figures/03_krony_quality_trend.{csv,png} from the results (default: central)")
    smol.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                      help="a SmolKronyConfig setting, e.g. -p init_from path/to/llama")
    smol.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    smol.add_argument("--out", default="", help="folder of the CSVs (default results/krony_smollm2, the smoke scale's "
                      "in its smoke/ subfolder)")
    smol.set_defaults(handler=run_smol)


SMOL_PARTS = ("compressed", "central", "grid", "table6", "trend")


def run_smol(args) -> int:
    """``lmstudy krony smol``: the parts of the SmolLM2 comparison, each saved as a CSV and printed."""
    from pathlib import Path

    import pandas as pd
    import torch

    from lmstudy.krony import smol
    from lmstudy.notebook_runner import parse_overrides
    from lmstudy.paths import REPO_ROOT

    torch.set_num_threads(args.threads)
    config = smol.smol_config(args.scale, **parse_overrides(args.parameter))
    default = REPO_ROOT / "results" / "krony_smollm2" / ("" if args.scale == "cpu" else args.scale)
    out = Path(args.out) if args.out else default
    out.mkdir(parents=True, exist_ok=True)
    builders = {"compressed": smol.compressed_table, "central": smol.central_table, "grid": smol.grid_table,
                "table6": smol.table6}
    if set(args.parts) & set(builders):
        pd.DataFrame([smol.base_row(config)]).to_csv(out / "base.csv", index=False)
    for part in args.parts:
        if part == "trend":
            _draw_quality_trend(out, into=None if args.scale == "cpu" and not args.out else out)
            continue
        table = builders[part](config)
        table.to_csv(out / f"{part}.csv", index=False)
        shown = [c for c in ("model", "class", "init", "factors", "scalars", "seed", "parameters",
                             "before_wikitext_bpb", "wikitext_bpb", "lambada_acc", "best_val_loss", "train_seconds")
                 if c in table]
        print(f"{part} -> {out / f'{part}.csv'}\n{table[shown].to_string(index=False)}", flush=True)
    return 0


def _draw_quality_trend(results, into=None) -> None:
    """The completed trend (lmstudy.krony.quality_trend) with the SmolLM2 results in ``results``, drawn into
    ``into`` (default figures/: the published one)."""
    import matplotlib

    matplotlib.use("Agg")
    from lmstudy.krony.quality_trend import plot_quality_trend, summary, trend_points
    from lmstudy.paths import figures_dir

    into = into or figures_dir()
    points = trend_points(results)
    points.to_csv(into / "03_krony_quality_trend.csv", index=False)
    plot_quality_trend(points).savefig(into / "03_krony_quality_trend.png", dpi=120)
    print(f"trend -> {into / '03_krony_quality_trend.png'}\n{summary(points).to_string(index=False)}")


def print_table(args) -> int:
    """``lmstudy krony table``."""
    # Imported here: the Kronecker code needs torch and transformers, which `--help` should not wait for.
    if args.model:
        from transformers import AutoConfig

        from lmstudy.krony.llama import parameter_table
        from lmstudy.pretrained import resolve_pretrained

        print(parameter_table(AutoConfig.from_pretrained(resolve_pretrained(args.model))).to_string(index=False))
        return 0
    from lmstudy.krony.table import format_table

    print(format_table())
    return 0


def train_scratch(args) -> int:
    """``lmstudy krony scratch``: the scratch arm's pretraining, with the notebook's preset plus ``-p``."""
    from lmstudy.krony.baselines import scratch_pretraining
    from lmstudy.krony.config import preset_config
    from lmstudy.notebook_runner import parse_overrides

    config = preset_config(args.scale, parse_overrides(args.parameter))
    metrics = scratch_pretraining(config)
    print(f"scratch, equal data ({args.scale}): {metrics['steps']:,} steps, {metrics['tokens']:,} tokens, "
          f"{metrics['parameters']:,} parameters, final validation loss {metrics['val_loss']:.4f}")
    return 0
