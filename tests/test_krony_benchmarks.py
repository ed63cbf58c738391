"""Smoke checks of the Krony-PT benchmarks (tiny sizes, seconds): they run and report what they promise."""

from __future__ import annotations

import csv

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.tokenization import train_bpe

from tests.test_benchmarks import load_bench


def test_kronecker_bench_reports_the_goal_and_the_previous_layer(capsys):
    bench = load_bench("bench_kronecker")
    assert bench.main(["--tokens", "8", "--repeats", "1", "--warmup", "0", "--size", "ours 192->768",
                       "--previous", "--clock", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "before ms" in printed and "goal" in printed and "(24, 12)" in printed
    # The tiny-factor class runs the fused kernel, timed beside its BLAS plans; B = (2, 1) runs BLAS only.
    rows = {line.split(")")[0]: line for line in printed.splitlines() if line.startswith("ours")}
    assert "BLAS ms" in printed
    assert rows["ours 192->768    (384, 192"].split()[-7:-5] == ["-", "-"]
    # goal ms: the time half the FLOP ratio allows; floor ms: the layer's memory traffic alone, timed beside it.
    row = bench.benchmark_scheme((768, 192), ((24, 12), 1, False), tokens=64, repeats=1, warmup=0,
                                 device=torch.device("cpu"))
    assert row["goal_ms"] == pytest.approx(row["ms"]["dense"] * 2 / row["flop_ratio"])
    assert 0 < row["ms"]["floor"] < row["ms"]["dense"]
    # The goal covers factors at least 8 wide on every side; B = (4, 1) is outside it.
    assert bench.goal_status((24, 12), (32, 16), flop_ratio=9.6, speedup=4.8) == "met"
    assert bench.goal_status((24, 12), (32, 16), flop_ratio=9.6, speedup=4.7) == "NOT met"
    assert bench.goal_status((192, 192), (4, 1), flop_ratio=3.9, speedup=1.0) == "-"


def test_kronecker_bench_scheme_filter_and_compile_checks(capsys):
    bench = load_bench("bench_kronecker")
    assert bench.main(["--tokens", "8", "--repeats", "1", "--warmup", "0", "--size", "ours 192->768",
                       "--scheme", "24,12", "--clock", "cpu"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ours 192->768")]
    assert len(rows) == 3 and all("(24, 12)" in row for row in rows)  # one factor, 4, 4 + scalars; no (384, 192)
    with pytest.raises(SystemExit):  # compiling happens in the warm-up, so none is refused
        bench.main(["--compile", "default", "--warmup", "0", "--size", "ours 192->768"])
    with pytest.raises(SystemExit, match="two integers"):
        bench.main(["--scheme", "64x32"])


def test_krony_inference_bench_compares_base_dense_and_factored_forms(tmp_path):
    tokenizer = train_bpe(["the cat sat on the mat and the dog sat on the log"] * 20, vocab_size=300)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(tokenizer), n_positions=16,
                        bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    out = tmp_path / "inference.csv"
    bench = load_bench("bench_krony_inference")
    assert bench.main(["--model", str(tmp_path / "base"), "--prompt", "4", "--new-tokens", "2", "--repeats", "1",
                       "--out", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["form"] for row in rows] == ["base"] + ["dense", "factored"] * len(bench.VARIANTS)
    base = rows[0]
    assert float(base["score_speedup"]) == pytest.approx(1.0) and int(base["seq_len"]) == 16
    for row in rows[1:]:
        assert float(row["score_tok_s"]) > 0 and float(row["generate_tok_s"]) > 0
        smaller = int(row["parameters"]) < int(base["parameters"])
        assert smaller == (row["form"] == "factored"), row["model"]  # folded back: the base's size again


def test_krony_inference_bench_compresses_a_llama_at_its_own_classes(tmp_path):
    from test_smollm2 import BASE_TOKENIZER, tiny_llama
    from transformers import AutoTokenizer

    from lmstudy.krony.llama import llama_classes

    tokenizer = AutoTokenizer.from_pretrained(BASE_TOKENIZER)
    model = tiny_llama(len(tokenizer))
    model.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    out = tmp_path / "inference.csv"
    bench = load_bench("bench_krony_inference")
    assert bench.main(["--model", str(tmp_path / "llama"), "--seq-len", "32", "--prompt", "4", "--new-tokens", "2",
                       "--repeats", "1", "--out", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    classes = llama_classes(model.config)
    assert [row["size_class"] for row in rows[1:]] == [name for name in classes for _ in ("dense", "factored")]
    assert [int(row["factors"]) for row in rows[2::2]] == [kron.n_factors for kron in classes.values()]
    assert all(int(row["parameters"]) < int(rows[0]["parameters"]) for row in rows[2::2])  # the factored forms


def test_kronecker_bench_times_smollm2_shapes_bias_free(capsys):
    bench = load_bench("bench_kronecker")
    assert bench.main(["--tokens", "8", "--repeats", "1", "--warmup", "0", "--size", "smollm2 576->1536",
                       "--scheme", "48,24", "--clock", "cpu"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("smollm2 576->1536")]
    assert len(row) == 1 and "(32, 24)" in row[0] and row[0].split()[-3] in ("met", "NOT")
