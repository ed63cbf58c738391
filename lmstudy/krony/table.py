"""The parameter accounting of Krony-PT's Tables 1 and 2, recomputed from the GPT-2 small config alone.

``python -m lmstudy krony table`` (wired in ``lmstudy.__main__``) prints every row of the paper's Table 1 (one Kronecker factor pair per
MLP matrix, for each "Dimension" = the shape of ``c_fc``'s first factor A in the paper's ``(3072, 768)``
orientation), the multi-factor rows of Table 2 and the 4-factor model of Sec. 4.4, each beside the number
the paper prints. Nothing here needs weights: the counts come from ``lmstudy.krony.model``'s
``compressed_parameter_count``, which a test checks against real (meta-device) compressed models.

How the paper counts (all reproduced exactly):
- "params" is one factor pair ``m1*n1 + m2*n2`` with ``B = (3072/m1, 768/n1)``; the "GPT2" row is the
  dense matrix read as ``W ⊗ (1x1)``, hence 2,359,297 and a model size of 124,439,808 + 24 = 124,439,832.
- "Model size" is every parameter of ``GPT2LMHeadModel`` with tied input/output embeddings, position
  embeddings included: 67,816,704 outside the MLP weights + 24 matrices x params.
- Table 2 prints millions with few digits and truncates (86,691,720 is printed "86M"), so a printed value
  matches when it equals our count rounded *or* truncated to the printed digits.
- Sec. 4.4's "92.2M" for 4 factors of (1024, 256) with scalars is nanoGPT's ``get_num_params()``, which
  leaves out the position embeddings (92,983,488 - 786,432 = 92,197,056); the scalars add exactly
  4 x 2 x 12 = 96 parameters, as the paper says.
- Every Table 1 row reaches the maximal rank 768 = min(m1, n1) * min(m2, n2), the paper's criterion.
"""

from __future__ import annotations

import math
import textwrap

from transformers import GPT2Config

from lmstudy.krony.model import (
    KroneckerConfig, compressed_parameter_count, factor_pair_parameters, partner_shape,
)

# The model the paper's tables are about: GPT-2 small (124M, tied embeddings).
GPT2_SMALL = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
C_FC_SHAPE = (3072, 768)  # the paper's (out, in) orientation of c_fc.weight

# Table 1 as printed: (name, dimension, params, model size). The "..." row of the paper is left out.
PAPER_TABLE_1: list[tuple[str, tuple[int, int], int, int]] = [
    ("67M", (64, 32), 3200, 67_893_504),
    ("", (64, 48), 3840, 67_908_864),
    ("", (96, 32), 3840, 67_908_864),
    ("", (64, 64), 4672, 67_928_832),
    ("", (128, 32), 4672, 67_928_832),
    ("", (96, 48), 5120, 67_939_584),
    ("", (96, 64), 6528, 67_973_376),
    ("", (128, 48), 6528, 67_973_376),
    ("", (128, 64), 8480, 68_020_224),
    ("", (96, 96), 9472, 68_044_032),
    ("", (192, 48), 9472, 68_044_032),
    ("", (128, 96), 12480, 68_116_224),
    ("", (192, 64), 12480, 68_116_224),
    ("", (128, 128), 16528, 68_213_376),
    ("MF1", (256, 64), 16528, 68_213_376),
    ("MF2", (1024, 256), 262153, 74_108_376),
    ("", (768, 384), 294920, 74_894_784),
    ("", (1024, 384), 393222, 77_254_032),
    ("81M", (768, 768), 589828, 81_972_576),
    ("", (1536, 384), 589828, 81_972_576),
    ("", (1024, 768), 786435, 86_691_144),
    ("96M", (1536, 768), 1179650, 96_128_304),
    ("GPT2", (3072, 768), 2359297, 124_439_832),
]

# Table 2 as printed: (name, dimension, params, {n_factors: model size in millions as printed}).
PAPER_TABLE_2: list[tuple[str, tuple[int, int], int, dict[int, str]]] = [
    ("MF1", (256, 64), 16528, {1: "68.2", 2: "68.6", 3: "69"}),
    ("MF2", (1024, 256), 262153, {1: "74", 2: "80", 3: "86"}),
]

# Sec. 4.4: "92.2M parameters, attained with 4 factors of size (256, 1024)" (c_proj's orientation), with
# scalars; counted without position embeddings (see the module docstring).
PAPER_SECTION_4_4 = ("4 factors + scalars", (1024, 256), 4, "92.2")


def _printed_millions_match(count: int, printed: str) -> bool:
    """Whether ``printed`` (millions, e.g. "68.2") is ``count`` rounded or truncated to its digits."""
    digits = len(printed.partition(".")[2])
    scaled = count / 10 ** (6 - digits)
    return float(printed) * 10**digits in (round(scaled), math.floor(scaled))


def _row(table: str, name: str, dimension: tuple[int, int], factors: int = 1, scalars: bool = False) -> dict:
    b_shape = partner_shape(C_FC_SHAPE, dimension)
    config = KroneckerConfig(a_shape=dimension, n_factors=factors, scalars=scalars)
    return {
        "table": table,
        "name": name,
        "dimension": dimension,
        "b_shape": b_shape,
        "factors": factors,
        "scalars": scalars,
        "max_rank": min(dimension) * min(b_shape),
        "params": factor_pair_parameters(dimension, b_shape),
        "model_size": compressed_parameter_count(GPT2_SMALL, config),
        "model_size_without_wpe": compressed_parameter_count(GPT2_SMALL, config, include_position_embeddings=False),
    }


def table_rows() -> list[dict]:
    """Every row of Tables 1 and 2 (and Sec. 4.4) with our counts, the paper's and whether they match.

    Keys: table, name, dimension (A of c_fc), b_shape, factors, scalars, max_rank, params (per factor
    pair), model_size, model_size_without_wpe, paper (as printed), matches.
    """
    rows = []
    for name, dimension, paper_params, paper_size in PAPER_TABLE_1:
        row = _row("1", name, dimension)
        row["paper"] = f"{paper_params:,} / {paper_size:,}"
        row["matches"] = row["params"] == paper_params and row["model_size"] == paper_size
        rows.append(row)
    for name, dimension, paper_params, sizes in PAPER_TABLE_2:
        for factors, printed in sizes.items():
            row = _row("2", name, dimension, factors)
            row["paper"] = f"{paper_params:,} / {printed}M"
            row["matches"] = row["params"] == paper_params and _printed_millions_match(row["model_size"], printed)
            rows.append(row)
    name, dimension, factors, printed = PAPER_SECTION_4_4
    row = _row("4.4", name, dimension, factors, scalars=True)
    row["paper"] = f"{printed}M (no wpe)"
    row["matches"] = _printed_millions_match(row["model_size_without_wpe"], printed)
    rows.append(row)
    return rows


def format_table() -> str:
    """The rows of ``table_rows()`` as a fixed-width text table with a short legend."""
    header = ("table", "name", "A (c_fc)", "B", "f", "s", "rank", "params/pair", "model size", "no wpe", "paper", "ok")
    lines = [
        (
            row["table"], row["name"], str(row["dimension"]), str(row["b_shape"]), str(row["factors"]),
            "yes" if row["scalars"] else "", str(row["max_rank"]), f"{row['params']:,}", f"{row['model_size']:,}",
            f"{row['model_size_without_wpe']:,}", row["paper"], "yes" if row["matches"] else "NO",
        )
        for row in table_rows()
    ]
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip() for cells in [header, *lines]]
    text.insert(1, "  ".join("-" * width for width in widths))
    text.append("")
    text.append(textwrap.fill(
        "GPT-2 small, tied embeddings. A is c_fc's first factor in the paper's (3072, 768) orientation; c_proj "
        "uses the transposes. f = factors per matrix, s = per-factor scalars, rank = the largest rank of one pair, min(A) * min(B). "
        "'model size' counts every parameter (Tables 1, 2); 'no wpe' leaves out position embeddings "
        "(nanoGPT's count, used in Sec. 4.4). Paper values in millions match when rounded or truncated.",
        width=110,
    ))
    return "\n".join(text)
