"""Smoke checks of benchmark scripts (tiny sizes, seconds): they run and write what they promise."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def base_throughput():
    return load_bench("bench_base_throughput")


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_base_throughput_quick_writes_one_row_per_method(base_throughput, tmp_path):
    out = tmp_path / "throughput.csv"
    base_throughput.main(["--quick", "--threads", "1", "--compile", "off", "--out", str(out)])
    rows = read_rows(out)
    assert [(r["method"], r["threads"], r["compile"]) for r in rows] == [("bare", "1", "off"), ("train", "1", "off")]
    for row in rows:
        assert row["error"] == ""
        assert float(row["tokens_per_s"]) > 0 and float(row["sgemm_gflops"]) > 0
        assert float(row["model_gflops"]) == pytest.approx(
            float(row["tokens_per_s"]) * float(row["flops_per_token"]) / 1e9, rel=1e-4)
        assert float(row["mfu"]) == pytest.approx(float(row["model_gflops"]) / float(row["sgemm_gflops"]), rel=1e-4)
    bare, ours = rows
    assert bare["vs_bare"] == ""
    assert float(ours["vs_bare"]) == pytest.approx(1 - float(ours["tokens_per_s"]) / float(bare["tokens_per_s"]),
                                                   rel=1e-3, abs=1e-4)


def test_base_throughput_records_a_compile_failure(base_throughput, tmp_path, monkeypatch):
    def broken_compile(model, *args, **kwargs):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(base_throughput.torch, "compile", broken_compile)
    out = tmp_path / "throughput.csv"
    base_throughput.main(["--quick", "--threads", "1", "--compile", "on", "--methods", "bare", "--out", str(out)])
    (row,) = read_rows(out)
    assert row["compile"] == "on" and row["tokens_per_s"] == ""
    assert row["error"] == "RuntimeError: no C++ compiler here"


def test_entity_step_time_bench_runs_with_the_per_mention_variant(capsys):
    bench = load_bench("bench_entity_gpt2")
    bench.main(["--threads", "1", "--vocab", "64", "--sizes", "1x32", "--batch-size", "2", "--seq-len", "16",
                "--steps", "1", "--warmup", "1", "--per-mention"])
    lines = capsys.readouterr().out.splitlines()
    assert "FLOP ratio" in lines[1] and "mention/GPT2" in lines[1]
    row = lines[3].split()
    assert row[0] == "1x32" and float(row[6]) > 1  # GPT2E's FLOPs exceed GPT2's


def test_optimizer_bench_times_three_kernels_that_agree_to_rounding(capsys):
    load_bench("bench_optimizer").main(["--size", "tiny", "--repeats", "1"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["default", "foreach", "fused"]
    assert all(float(row[1]) > 0 for row in rows)
    assert all(float(row[3]) < 1e-5 for row in rows)  # the kernels compute the same step up to rounding


def test_kernel_ab_reads_the_old_kernel_from_git_and_refuses_bad_input():
    ab = load_bench("bench_kronecker_kernel_ab")
    assert "kron_forward" in ab.source_at("HEAD")
    with pytest.raises(SystemExit, match="no lmstudy/krony/fused_kernel.cpp at revision 'no-such-rev'"):
        ab.source_at("no-such-rev")
    assert ab.parse_scheme("64,32,48,24") == (64, 32, 48, 24, 1)
    assert ab.parse_scheme("24,12,32,16,4") == (24, 12, 32, 16, 4)
    for bad in ("64,32", "64,32,48,x", "0,32,48,24"):
        with pytest.raises(SystemExit, match="a scheme is P,Q,R,T"):
            ab.parse_scheme(bad)
    assert all(ab.parse_scheme(text) for text in ab.DEFAULT_SCHEMES)
    # two versions or one kernel in both orders, not both; the retired --patch and --mkl are gone
    for args in ([], ["--against", "HEAD", "--orders"], ["--against", "HEAD", "--patch", "x.patch"],
                 ["--against", "HEAD", "--mkl"]):
        with pytest.raises(SystemExit):
            ab.main(args)


def test_kernel_ab_orders_times_one_kernel_in_both_orders_that_agree():
    from lmstudy.krony import fused

    ab = load_bench("bench_kronecker_kernel_ab")
    kernel = fused.kernel()
    assert kernel is not None
    row = ab.compare({"old": kernel, "new": kernel}, (8, 8, 8, 8, 2), repeats=1, orders={"old": False, "new": True})
    assert row["order"] == "B vs A" and row["agree"] and row["old_ms"] > 0 and row["new_ms"] > 0


def test_kernel_ab_builds_the_new_version_with_extra_flags_as_a_module_of_its_own(tmp_path, monkeypatch):
    import torch.utils.cpp_extension

    ab = load_bench("bench_kronecker_kernel_ab")
    calls = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: calls.append(kwargs) or kwargs["name"])
    source = (ab.ROOT / ab.KERNEL).read_text()
    plain, aligned = ab.build(source, tmp_path), ab.build(source, tmp_path, flags=["-falign-loops=64"])
    assert plain != aligned  # same source, other flags: two modules, not one cached build reused
    assert calls[0]["extra_cflags"] == ab.BUILD_FLAGS
    assert calls[1]["extra_cflags"] == [*ab.BUILD_FLAGS, "-falign-loops=64"]


def test_smollm2_bench_quick_measures_every_part_on_a_tiny_llama(tmp_path):
    out = tmp_path / "smollm2.csv"
    load_bench("bench_smollm2").main(["--quick", "--compile", "off", "--weights", "float32", "int8", "--out", str(out)])
    rows = read_rows(out)
    assert [(r["part"], r["mode"]) for r in rows] == [
        ("peak", "sgemm fp32"), ("peak", "gemm bf16"), ("train", "eager, fp32"), ("train", "eager, bf16 autocast"),
        ("generate", "float32"), ("generate", "int8"), ("app", "app, default weights"),
        ("quality", "float32"), ("quality", "int8")]
    peak = float(rows[0]["gflops"])
    for row in rows[2:4]:
        assert float(row["mfu"]) == pytest.approx(float(row["gflops"]) / peak, rel=1e-4)
    for row in rows[4:6]:
        assert 0 < float(row["first_token_s"]) <= float(row["seconds"]) and int(row["new_tokens"]) > 0
    assert 0 < float(rows[6]["first_token_s"]) <= float(rows[6]["seconds"])
    reference, int8 = (float(row["bits_per_byte"]) for row in rows[7:])
    assert float(rows[8]["vs_float32"]) == pytest.approx(int8 / reference - 1, rel=1e-6, abs=1e-12)
