"""Paper-scale dry runs: every study's ``paper`` preset, at its real model sizes, end to end with the counts shrunk.

Each test runs ``python -m lmstudy study NAME --scale paper -p KEY VALUE ...`` exactly as a user would, with the
overrides of :data:`DRY_RUNS` (so a dry run can be repeated by hand from the command line; :func:`command` prints
it). What is shrunk is counts: steps, documents, evaluation windows, seeds, grid cells, search trials. What is
kept is the models' sizes: GPT-2 small's 12 x 768 (124M with GPT-2's vocabulary), the 3 x 1150 AWD-LSTM with
400-d embeddings, the 12 x 400 word-level GPT-2 of 01b. Where batch or context are shrunk it says why, below:
on the 2-core CI machine one step of GPT-2 small at the paper's batch (8-32 sequences of 256-1024 tokens) takes
about a minute, so the batches are cut for time, never the width or depth of a model.

``init_from="gpt2"`` (studies 02 and 04) points at a folder with GPT-2 small's real config written by the test
(``GPT2LMHeadModel(GPT2Config()).save_pretrained``, random weights: there is no hub here) plus GPT-2's BPE from
``$LMSTUDY_DATA/gpt2_bpe``, through the same ``init_from`` path a user's real weights take (``lmstudy.pretrained``).

Each test prints one markdown row (study, model size, wall seconds, CPU seconds and peak memory of the study's
process tree): the dry-run table of docs/scaling-up.md is ``pytest -s -m paper_dry_run tests/test_paper_dry_run.py``
output (``-n 0``: one process, so that ``-s`` shows it). Marked ``paper_dry_run``; ``make test`` (CI) runs all six,
one after the other on one worker, first of the suite (``tests/conftest.py``, ``FIRST``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmstudy.notebook_runner import parse_overrides

# Study -> (overrides as command-line values, the corpora (and tools) it needs). Comments say why a key that is
# not a count changes. Step times: 6 x parameters x tokens FLOPs at the ~80 GFLOP/s this 2-core machine trains
# GPT-2 at (docs/scaling-up.md, "Paper-scale dry runs").
DRY_RUNS: dict[str, tuple[dict[str, str], list[str]]] = {
    "00_quickstart": ({
        "max_steps": "2", "eval_every": "2",
        "eval_tokens": "500",  # a few evaluation windows (2 of 256): 2,000 tokens of valid and test were a quarter
        "train_tokens": "0",  # all of PTB's train: its whole vocabulary, so the model has its real size
        "batch_size": "4",  # time: a 32 x 256 step of the 12 x 768 model (93M) is ~4.6 TFLOP, ~1 minute
    }, ["ptb"]),
    "01_embedding_init": ({
        "configs": "standard_vs_ours", "seeds": "[0]", "settings": "[Std]", "section3_seeds": "[]",
        "max_epochs": "1", "max_steps": "2", "train_tokens": "3000", "vector_epochs": "1", "pretrain_sentences": "1000",
        # a few evaluation windows: 500 tokens of valid and test, 50 positions of a batch of 10 (reading 1,000 tokens
        # one position at a time through the 3 x 1150 LSTM was two fifths of its LSTM time, in 18 runs)
        "eval_tokens": "500",
        # the freezing trend: its 4 configurations on one data setting, Rare (with Std-news too, its 8 runs were half
        # of this dry run), for one epoch of 1,500 tokens (one step of 20 x 70: training was three quarters of it)
        "trend_seeds": "[0]", "trend_train_tokens": "1500", "trend_epoch_cap": "1", "trend_stop_after": "1",
        "trend_lengths": "[1]", "trend_settings": "[Rare]",
        # time: the paper's test batch of 1 runs the 3 x 1150 LSTM one position at a time over the test tokens
        # (awd-lstm-lm's exact protocol), a third of this dry run's time in its 10 runs; 10 rows at once here
        "test_batch_size": "10",
    }, ["ptb", "reuters21578", "bbc_news"]),
    "01b_embedding_init_extended": ({
        "configs": "pair", "seeds": "[0]", "domains": "[news]", "unk_cutoffs": "[0]",
        "vector_sources": "[news]", "train_multiples": "[1]", "search_trials": "1", "max_epochs": "1",
        "max_steps": "2", "train_tokens": "3000", "eval_tokens": "500", "vector_epochs": "1",  # (as 01)
        "pretrain_sentences": "1000",
        "test_batch_size": "10",  # time (as 01)
        # the word-level GPT-2 keeps 12 x 400; batch 4 x 128 for time (as 00; its runs were half this dry run)
        "transformer": "{n_layer: 12, n_head: 8, n_embd: 400, seq_len: 128, batch_size: 4, max_steps: 2, "
                       "eval_every: 2, lr: 3.0e-4}",
    }, ["reuters21578", "bbc_news", "kenlm"]),
    "02_entity_transformer": ({
        "init_from": "{gpt2}", "train_docs": "2", "eval_docs": "1", "budgets": "[1, 2]", "eval_every": "2",
        "corpora": "[gum]",  # GUM's documents only: a LitBank test document is ~2,800 sub-tokens, 3x GUM's
        "warmup_steps": "1", "seeds": "[0]", "ablation_seeds": "[0]", "lambada_examples": "4", "timing_steps": "1",
        "similarity_docs": "1", "tsne_entities": "5", "ner_train_docs": "1", "ner_eval_docs": "1",
        "ner_epochs": "1",
        "ner_corpus": "gum",  # the NER probe on GUM's 10 types (the other corpus the study offers): its three
        # documents are a third of LitBank's in sub-tokens, and reading them through both models was a quarter
        # of this dry run's time
        "batch_size": "1", "seq_len": "128",  # time: a step of 8 x 512 positions of GPT-2 small is ~3 TFLOP,
        # ~40 s; 1 x 128 is 1/32 of it (the six fine-tuning runs' steps and the step-time comparison's 12)
        "max_doc_tokens": "256",  # a few evaluation windows: each document's first 256 sub-tokens (a GUM document
        # is ~1,100; scoring the test document with and without entities was two fifths of what was left), and
        # the NER probe's documents cut after their last sentence within them (Table 4 and t-SNE read their one
        # document whole: its first coreference mention is its 262nd word)
        "mixed_precision": "{mixed_precision}",
    }, ["gum", "litbank", "lambada", "gpt2_bpe"]),
    "03_kronecker": ({
        "fractions": "[1.0]", "classes": "[81M]", "inits": "[van_loan]", "compare_class": "81M", "seeds": "[0]",
        "table6_class": "81M", "table6_factors": "[1]", "finetune_tokens": "512", "evals_per_run": "1",
        "val_tokens": "512", "lambada_examples": "4", "domains": "[news]", "domain_documents": "1",
        "eval_batch_size": "2",
        "wikitext_tokens": "512",  # a few evaluation windows (2 of 256): the protocol's scores of its 9 models
        # were a fifth of this dry run
        # The shared base at GPT-2 small's dims (12 x 768, context and vocabulary of the paper preset's data
        # pipeline), trained for 3 steps on a sliver of its text; batch 2 x 256 for time; no torch.compile (a
        # minute of compiling on the CPU for 3 steps); validation once, after the last step, not after each (it
        # was two thirds of the base's and the scratch arm's pretraining time), on its first 512 tokens (the
        # validation part holds whole documents, ~10k tokens even at 300 a domain: that one validation was a sixth
        # of this dry run).
        # The base preset's bf16 autocast where this CPU has bf16 matmuls, else fp32 (as 02 and 04).
        "base_overrides": "{data: {tokenizer_sample: 1.0, data_fraction: 0.002, valid_tokens_per_domain: 300}, "
                          "model: {seq_len: 256}, batch_size: 2, compute: 1.0e+12, compile: false, "
                          "eval_every_fraction: 1.0, max_eval_tokens: 512, mixed_precision: '{mixed_precision}'}",
    }, ["wikipedia", "litbank", "reddit", "imdb", "reuters21578", "bbc_news", "irc", "wikitext-2-raw", "lambada"]),
    "04_control_codes": ({
        "init_from": "{gpt2}", "codes": "[Wikipedia, Books, Reviews]", "train_docs": "5", "eval_docs": "1",
        "max_steps": "2", "eval_every": "2", "warmup_steps": "1", "generation_tokens": "2", "generation_seeds": "[0]",
        # a few evaluation windows: documents cut to 500 characters (~125 tokens, one window per code; a whole
        # book chunk or article is 10-30 windows, and scoring them was three quarters of this dry run's time)
        "max_doc_chars": "500",
        # the repetition sweep continues one neutral prompt, not 4 (its 8 decoding rules x 3 codes x 2 arms were
        # 192 generations and as many scorings: 3/10 of this dry run)
        "sweep_prompts": "1",
        "batch_size": "2", "seq_len": "128",  # time (as 02)
        "mixed_precision": "{mixed_precision}",
    }, ["wikipedia", "litbank", "imdb", "gpt2_bpe"]),
}

def bf16_on_this_cpu() -> str:
    """``bf16`` where the CPU runs bfloat16 matmuls natively (AVX512-BF16 or AMX), else ``no`` (emulated bf16
    autocast is tens of times slower than fp32; the dry run then keeps fp32 and says so)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "no"
    return "bf16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "no"


def fill(value: str, gpt2: Path | None, mixed_precision: str) -> str:
    """A :data:`DRY_RUNS` value with its placeholders filled: ``{gpt2}`` (the GPT-2 small folder) and
    ``{mixed_precision}`` (:func:`bf16_on_this_cpu`)."""
    return value.replace("{gpt2}", str(gpt2)).replace("{mixed_precision}", mixed_precision)


def command(study: str, overrides: dict[str, str]) -> list[str]:
    """The dry run's command line."""
    pairs = [part for key, value in overrides.items() for part in ("-p", key, value)]
    return [sys.executable, "-m", "lmstudy", "study", study, "--scale", "paper", *pairs]


@pytest.fixture(scope="module")
def gpt2_small(tmp_path_factory) -> Iterator[Path]:
    """GPT-2 small's real config (124M) with random weights and GPT-2's BPE, saved as a Hugging Face folder."""
    from conftest import require_corpus

    require_corpus("gpt2_bpe")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lmstudy.tokenization import gpt2_tokenizer

    folder = tmp_path_factory.mktemp("gpt2-small")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config()).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)  # 500 MB; pytest keeps its last three temporary folders


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory) -> Iterator[Path]:
    """One run cache for all the dry runs, whose corpus caches are the suite's: the studies share their token
    caches, shingles and the base's training manifest as they do in a user's ``runs/`` (a fresh cache per study
    would re-read and re-normalise the same text; in make test the leakage tests build them first, see
    ``FIRST`` in tests/conftest.py). Under pytest-xdist the six run on one worker (this file is one unit of
    work), sharing the one corpus cache with the other worker."""
    from conftest import runs_sharing_corpus_caches

    runs = runs_sharing_corpus_caches(tmp_path_factory.mktemp("dry") / "runs")
    yield runs
    # Gigabytes of checkpoints of 100M-parameter models, in each of the three temporary folders pytest keeps: three
    # local CI runs filled this machine's disk. Removed when the module ends (the ``cache`` link, not the cache).
    shutil.rmtree(runs, ignore_errors=True)


def largest_model(runs: Path, since: float) -> int:
    """The most parameters any run written after ``since`` recorded (its metrics.json ``parameters``)."""
    counts = []
    for path in runs.rglob("metrics.json"):
        if path.stat().st_mtime < since:
            continue
        metrics = json.loads(path.read_text())
        if isinstance(metrics, dict) and isinstance(metrics.get("parameters"), int):
            counts.append(metrics["parameters"])
    return max(counts, default=0)


@pytest.mark.paper_dry_run
@pytest.mark.parametrize("study", list(DRY_RUNS))
def test_paper_preset_dry_run(study, shared_runs, tmp_path, request):
    from conftest import require_corpus, require_kenlm

    overrides, corpora = DRY_RUNS[study]
    for needed in corpora:
        if needed == "kenlm":
            require_kenlm()
        else:
            require_corpus(needed)
    precision = bf16_on_this_cpu()
    # GPT-2 small's folder (~500 MB) is written only for the studies that start from it
    gpt2 = request.getfixturevalue("gpt2_small") if any("{gpt2}" in v for v in overrides.values()) else None
    overrides = {key: fill(value, gpt2, precision) for key, value in overrides.items()}
    parse_overrides(list(overrides.items()))  # every value parses as the CLI will read it
    env = {**os.environ, "LMSTUDY_RUNS": str(shared_runs), "LMSTUDY_FIGURES": str(tmp_path / "figures"),
           "LMSTUDY_MODELS": str(tmp_path / "models"), "TQDM_DISABLE": "1", "MPLBACKEND": "agg",
           "HF_HUB_OFFLINE": "1"}
    started_at, start = time.time(), time.perf_counter()
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        process = subprocess.Popen(command(study, overrides), stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)  # usage: the whole process tree (the notebook's kernel too)
    seconds = time.perf_counter() - start
    errors = (tmp_path / "err.txt").read_text()
    assert os.waitstatus_to_exitcode(status) == 0, errors[-4000:]
    executed = shared_runs / "notebooks" / f"{study}-paper.ipynb"
    cells = json.loads(executed.read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    parameters = largest_model(shared_runs, started_at)
    assert parameters > 20_000_000, f"the dry run's largest model has {parameters:,} parameters: not paper-sized"
    peak_mib = usage.ru_maxrss / 1024  # Linux: KiB
    # CPU seconds of the process tree: what the run costs whatever else the machine is doing (wall seconds on a
    # loaded machine say little about the CI budget).
    cpu_seconds = usage.ru_utime + usage.ru_stime
    precision_note = "" if "mixed_precision" not in overrides else f", mixed precision {overrides['mixed_precision']}"
    print(f"\n| {study} | {parameters / 1e6:.1f}M{precision_note} | {seconds:.0f} | {cpu_seconds:.0f} "
          f"| {peak_mib:,.0f} |")
