"""The comparison's claims (lmstudy/ctrl/compare_claims.py) on hand-made tables: seeds are the replicates where a
model has several, domains or codes where it has one; the goals read against their bars; every row's verdict comes
from lmstudy.claims' rule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import pandas as pd

from lmstudy.claims import DOES_NOT_HOLD, HOLDS, ONE_SEED, RULE, WITHIN_NOISE
from lmstudy.ctrl import compare, compare_claims
from lmstudy.ctrl.claims import GREEDY, NUCLEUS, PENALISED

CODES = ["A", "B", "C", "D"]
SEEDS = {compare.SMOL: [0, 1, 2], compare.DEMO: [0]}


def _bits(rng) -> pd.DataFrame:
    rows = []
    for model, seeds in SEEDS.items():
        margin = 0.3 if model == compare.SMOL else 0.05  # how much the right code saves
        level = 1.0 if model == compare.SMOL else 2.0  # bits per byte
        for seed, domain, document in itertools.product(seeds, CODES, range(3)):
            for condition in [*CODES, compare.NO_CODE]:
                bpb = level + (0 if condition == domain else margin) + rng.normal(0, 0.01)
                rows.append({"model": model, "train_seed": seed, "domain": domain, "document": document,
                             "condition": condition, "nats": bpb * 100 * np.log(2), "bytes": 100})
    return pd.DataFrame(rows)


def _control(rng) -> pd.DataFrame:
    rows = []
    for model, seeds in SEEDS.items():
        rate = 0.9 if model == compare.SMOL else 0.3
        for seed, code, prompt, sample in itertools.product(seeds, CODES, ["The", "This is"], range(4)):
            rows.append({"model": model, "train_seed": seed, "code": code, "prompt": prompt, "seed": sample,
                         "correct": bool(rng.random() < rate)})
    return pd.DataFrame(rows)


def _quality(rng) -> pd.DataFrame:
    rows = []
    for model in SEEDS:
        for setting, prompt, code in itertools.product((GREEDY, PENALISED, NUCLEUS), ["The", "I"], CODES):
            judge = {GREEDY: 1.0, PENALISED: 1.02, NUCLEUS: 1.5}[setting] + (0.0 if model == compare.SMOL else 0.5)
            rows.append({"model": model, "train_seed": 0, "setting": setting, "prompt": prompt, "code": code,
                         "repeated_4gram": (0.4 if setting == GREEDY else 0.0) + rng.normal(0, 0.01),
                         "judge_bpb": judge + rng.normal(0, 0.005)})
    return pd.DataFrame(rows)


def _probes(rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    mixing, links = [], []
    for model in SEEDS:
        kept = 0.9 if model == compare.SMOL else 0.1
        for (domain, template), seed in itertools.product([("A", "Q:"), ("B", "English:")], range(8)):
            mixing.append({"model": model, "train_seed": 0, "domain": domain, "template": template, "mixed": True,
                           "code": f"{domain} {template}", "seed": seed, "template_kept": float(rng.random() < kept),
                           "domain_kept": float(rng.random() < kept)})
        for (probe, value), seed in itertools.product([("topic", "grain"), ("topic", "crude")], range(8)):
            named = rng.random() < kept
            links.append({"model": model, "train_seed": 0, "probe": probe, "value": value, "seed": seed,
                          "continuation": f"prices of {value if named else 'oil'} rose", "overlap": 0.5,
                          "mentions": float(named)})
    return pd.DataFrame(mixing), pd.DataFrame(links)


def test_the_comparison_claims_read_seeds_goals_and_both_models():
    rng = np.random.default_rng(0)
    mixing, links = _probes(rng)
    tables = {"bits": _bits(rng), "controllability": _control(rng), "quality": _quality(rng), "mixing": mixing,
              "links": links}
    table = compare_claims.claims(tables)
    assert table.attrs["rule"] == RULE

    def row(start: str, level: str) -> pd.Series:
        found = table[table["claim"].str.startswith(start) & (table["level"] == level)]
        assert len(found) == 1, (start, level, len(found))
        return found.iloc[0]

    steer = "Control codes govern style and content: held-out text is more likely under its own domain code than under no code"
    assert row(steer, compare.SMOL)["verdict"] == HOLDS and row(steer, compare.SMOL)["seeds"] == 3
    assert "training seeds" in row(steer, compare.SMOL)["note"]
    assert "one training seed" in row(steer, compare.DEMO)["note"] and row(steer, compare.DEMO)["seeds"] == 4
    assert row("Controllability at least 0.6", compare.SMOL)["verdict"] in (HOLDS, WITHIN_NOISE)
    assert row("Controllability at least 0.6", compare.DEMO)["verdict"] == DOES_NOT_HOLD
    assert row("Attribution top-1 at least 0.8", compare.SMOL)["verdict"] == HOLDS  # every document ranks right
    assert row("Code-mixing keeps the domain and the template", compare.DEMO)["verdict"] == DOES_NOT_HOLD
    assert row("A link code's changed topic", compare.SMOL)["verdict"] == HOLDS
    assert row("Greedy sampling with θ ≈ 1.2 prevents", compare.SMOL)["verdict"] == HOLDS
    assert row("A control-code model fine-tuned from a well-pretrained", "side by side")["verdict"] == HOLDS
    assert ONE_SEED not in set(table["verdict"])  # every row has replicates


def test_write_figures_from_per_model_tables(tmp_path):
    rng = np.random.default_rng(1)
    mixing, links = _probes(rng)
    examples = pd.DataFrame([{"model": m, "train_seed": 0, "example": 0, "prompt": "The knife", "code": c,
                              "continuation": f"{m} text {c}"} for m in SEEDS for c in ("Wikipedia", "Books")])
    stacked = {"bits": _bits(rng), "controllability": _control(rng), "quality": _quality(rng), "mixing": mixing,
               "links": links, "examples": examples}
    for part, table in stacked.items():  # the layout compare() writes: results/<model>[/seed-N]/<part>.csv
        for (model, seed), rows in table.groupby(["model", "train_seed"]):
            folder = tmp_path / "results" / (model if seed == 0 else f"{model}/seed-{seed}")
            folder.mkdir(parents=True, exist_ok=True)
            rows.drop(columns=["model", "train_seed"]).to_csv(folder / f"{part}.csv", index=False)
    paths = compare.write_figures(tmp_path / "figures", tmp_path / "results")
    summary = pd.read_csv(paths["summary"]).set_index("measure")
    assert list(summary.columns) == [compare.SMOL, compare.DEMO]
    assert summary.loc["attribution top-1", compare.SMOL].endswith("(3 seeds)")  # seeds: mean ± sd
    assert float(summary.loc["bits/byte, right code", compare.DEMO]) == pytest.approx(2.0, abs=0.02)
    side = pd.read_csv(paths["examples"])
    assert list(side.columns) == ["example", "prompt", "code", compare.SMOL, compare.DEMO] and len(side) == 2
    assert paths["domains_plot"].stat().st_size > 10_000 and paths["confusion"].is_file()
