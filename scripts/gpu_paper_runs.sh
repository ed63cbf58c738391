#!/usr/bin/env bash
# The paper presets of 03 (Krony-PT) and 02 (Entity-Transformers) on one lent GPU, in one device call of under
# 10 minutes: the paper-size shared base (GPT-2 small's 12 x 768, context 1024, our ~45k-id BPE) pretrained on 10%
# of our pretraining text, then each study from it with its counts cut to fit the lease (values below).
#
#   scripts/gpu_paper_runs.sh pack            # here: fill .gpu/ with what the GPU machine lacks (below)
#   scripts/gpu_paper_runs.sh run OUT         # there, from the repository root (device tool: carry .gpu)
#   scripts/gpu_paper_runs.sh unpack RESULTS [DEST]  # here: OUT/results.tar.xz -> DEST (default
#                                                    # results/gpu/<today, UTC>): runs, notebooks, figures
#
# Ran on three H200 leases, each with its folder and README under results/gpu/: 2026-11-26 (log.txt, gpu.csv, the
# GPU's use every 2 s), 2026-11-27 (two processes at a time as below) and 2026-11-27-third (STUDIES=03
# KRONY_SEEDS="[0, 1, 2]"); scripts/gpu_tables.sh draws 03's tables of a lease stopped at its cap. A lease carries
# the working tree and at most 64 MiB: our tracked files are ~110 MB
# (results/runs and models/ are most of it, and neither is read here), so for the call they were taken out of the
# index and ignored (`git rm -r --cached -q results/runs models/base*  models/ctrl-demo` plus those paths in
# .git/info/exclude; `git reset -q` and the exclude lines removed right after).
# The GPU machine has no corpora, no package registry and no run cache, so
# `pack` puts into .gpu/ (git-ignored): wheels of what its Python lacks (papermill's kernel stack, nltk, and the
# transformers we test with), the corpora the two studies read once the base exists (GUM, the news domain's
# Reuters and BBC, LAMBADA, WikiText-2 raw), and the base's prepared token streams (the run cache's base_data run
# for BASE's data config, xz-compressed). `run` trains the base (`lmstudy base train --overrides`) beside 03's scratch
# pretraining, exports the base as a Hugging Face folder, then runs 03 from it (`-p base_overrides`, the same run)
# beside 02 from the folder (`init_from`), each study through scripts/gpu_run.sh with a time cap (interrupted and
# archived when it is reached), and writes OUT/log.txt, a log per process and OUT/results.tar.xz (every run's config, metrics and log, the executed notebooks, the figures, the
# base's export records). REHEARSE=1 runs the same steps on a CPU with every count cut to seconds (a check of the
# command, not a result: its numbers mean nothing); on the GPU machine it checks every cell of both notebooks on
# CUDA in a couple of minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
carry=.gpu

# What runs. BASE: the base preset's changes (data: the first 10% of every domain's pretraining text, 9.9M tokens,
# validation 20k tokens a domain as at cpu scale; 8e15 FLOPs = 9.4M tokens, one pass; validation and checkpoints
# every tenth of the run; no torch.compile: its first-step compile is time a 10-minute lease would not get back).
BASE="{data: {data_fraction: 0.1, valid_tokens_per_domain: 20000}, compute: 8.0e+15, compile: false,
       eval_every_fraction: 0.1}"
# 03: the 81M class with Van Loan init against its distilled and scratch same-size models, from all three kept
# checkpoints of the base (the trend), the seeds of KRONY_SEEDS (one by default; the third lease, with 03 alone,
# ran three); 1M tokens of continued training each; the evaluation slices cut.
KRONY=(-p fractions "[0.1, 0.3, 1.0]" -p classes "[81M]" -p inits "[van_loan]" -p compare_class 81M
       -p seeds "${KRONY_SEEDS:-[0]}"
       -p table6_class 81M -p table6_factors "[1]" -p finetune_tokens 1048576 -p evals_per_run 2
       -p val_tokens 65536 -p wikitext_tokens 65536 -p lambada_examples 1000 -p domains "[news]"
       -p domain_documents 10)
# 02: GPT2 vs GPT2E fine-tuned from the base on GUM (LitBank's books are not carried), two budgets, two seeds.
ENTITY=(-p corpora "[gum]" -p ner_corpus gum -p budgets "[25, 100]" -p eval_every 25 -p warmup_steps 10
        -p seeds "[0, 1]" -p ablation_seeds "[0]" -p lambada_examples 1000 -p timing_steps 20
        -p similarity_docs 10 -p ner_epochs 5)
# Time: the whole run stops within TOTAL_SECONDS (the device tool's limit is 600 per command). Two stages, each
# two processes side by side on the one GPU (an H200 holds both; one process alone left it idle between steps,
# evaluations and notebook cells):
#   1. the base's pretraining (at most BASE_MINUTES) beside 03's scratch arm's pretraining, which needs no base
#      (`lmstudy krony scratch`; 47 and ~40 GiB);
#   2. 03 from the base beside 02 from its export, each until 40 s before TOTAL_SECONDS (60 and 16 GiB).
# Each process logs to a file of its own in OUT (base.log, scratch.log, krony.log, entity.log); log.txt has the stages.
# STUDIES: which of the two run after the base ("03 02", the default; "02" alone gives 02 the whole time, for a
# lease that finishes what a cap cut: the base is trained again either way, a lease keeps no weights).
TOTAL_SECONDS=${TOTAL_SECONDS:-560} BASE_MINUTES=4 STUDIES=${STUDIES:-"03 02"}
CORPORA=(gum reuters21578 bbc_news lambada wikitext-2-raw)
WHEELS=(asttokens==3.0.2 comm==0.2.3 defusedxml==0.7.1 entrypoints==0.4.2 executing==2.3.0 fastjsonschema==2.22.3
        ipykernel==7.4.0 ipython==9.18.1 ipython-pygments-lexers==1.1.1 jsonschema==4.26.0
        jsonschema-specifications==2025.9.1 jupyter-client==8.10.0 jupyter-core==5.9.1 matplotlib-inline==0.2.2
        nbclient==0.11.0 nbformat==5.11.1 nest-asyncio2==1.7.4 nltk==3.10.4 papermill==2.7.0 pexpect==4.9.0
        platformdirs==4.14.7 prompt-toolkit==3.0.53 ptyprocess==0.7.0 pure-eval==0.2.4 pyzmq==27.3.0
        referencing==0.37.0 rpds-py==2026.9.1 stack-data==0.6.3 tenacity==9.2.1 tornado==6.6.1 traitlets==5.16.1
        wcwidth==0.9.4 transformers==5.23.0
        optuna==5.0.0 alembic==1.20.1 sqlalchemy==2.1.9 colorlog==6.12.0 mako==1.4.3)  # `lmstudy`'s parser imports optuna

if [ "${REHEARSE:-0}" = 1 ]; then  # seconds on a CPU: a 2 x 64 model on the same data run (same data config)
    BASE="{data: {data_fraction: 0.1, valid_tokens_per_domain: 20000}, model: {n_layer: 2, n_head: 2, n_embd: 64,
           seq_len: 128}, batch_size: 2, compute: 1.0e+11, compile: false, mixed_precision: 'no', eval_every_fraction: 1.0}"
    KRONY+=(-p finetune_tokens 512 -p val_tokens 256 -p wikitext_tokens 512 -p lambada_examples 4
            -p domain_documents 1 -p evals_per_run 1)
    ENTITY+=(-p budgets "[1, 2]" -p eval_every 2 -p warmup_steps 1 -p seeds "[0]" -p train_docs 2 -p eval_docs 1
             -p batch_size 1 -p seq_len 64 -p max_doc_tokens 128 -p lambada_examples 4 -p timing_steps 1
             -p similarity_docs 1 -p ner_train_docs 1 -p ner_eval_docs 1 -p ner_epochs 1 -p mixed_precision no)
fi

pack() {
    : "${LMSTUDY_DATA:?set LMSTUDY_DATA to the corpora folder}"
    mkdir -p "$carry"
    rm -rf "$carry/wheels"
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$carry/wheels" "${WHEELS[@]}" || return 1
    rm -f "$carry/data.tar"  # (uncompressed before 2026-11-27)
    tar -C "$LMSTUDY_DATA" -cf - "${CORPORA[@]}" | xz -T0 -6 > "$carry/data.tar.xz" || return 1
    # The base's data run, prepared here (BPE training and the token streams; the corpus caches of this runs/)
    local data_run
    data_run=$($PY - "$BASE" <<'EOF'
import sys
from lmstudy.base import final_config, prepare_data
from lmstudy.notebook_runner import parse_value
print(prepare_data(final_config("paper", **parse_value(sys.argv[1])).data).path)
EOF
) || return 1
    data_run=$(tail -n 1 <<<"$data_run")  # the path, on the last line: preparing the data may print before it
    tar -C "$(dirname "$(dirname "$data_run")")" -cf - "base_data/$(basename "$data_run")" | xz -T0 -6 \
        > "$carry/base_data.tar.xz" || return 1
    du -sh "$carry"/* "$carry"
}

run() {
    local out=${1:?usage: scripts/gpu_paper_runs.sh run OUT}
    local work=/tmp/lmstudy-gpu start=$SECONDS status=0
    mkdir -p "$out" "$work"/{data,runs,figures,models,archive}
    rm -rf "$work/results"
    log() { echo "[gpu_paper_runs +$((SECONDS - start))s $(date -u +%H:%M:%S)] $*" | tee -a "$out/log.txt" >&2; }
    # the wheels where this Python lacks them (the GPU machine; here, a rehearsal's Python has them all)
    if compgen -G "$carry/wheels/*.whl" >/dev/null && ! $PY -c "import papermill" 2>/dev/null; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
            "$carry"/wheels/*.whl || { log "wheels did not install"; return 1; }
        export PYTHONPATH=$work/site:$PWD
    fi
    export LMSTUDY_DATA=$work/data LMSTUDY_RUNS=$work/runs LMSTUDY_FIGURES=$work/figures LMSTUDY_MODELS=$work/models
    export TQDM_DISABLE=1 MPLBACKEND=agg HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PY ALLOW_CPU=${REHEARSE:-0}
    tar -C "$work/data" -xJf "$carry/data.tar.xz" && tar -C "$work/runs" -xJf "$carry/base_data.tar.xz" || return 1
    $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
          torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$out/log.txt"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$out/log.txt"
        # the GPU's use every 2 s, for the peak memory and utilisation of each stage (log.txt says when each began)
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 >"$out/gpu.csv" 2>&1 &
    fi
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # 124M models with ~45k-way logits: less fragmentation

    local krony_p=(-p base_overrides "$BASE" "${KRONY[@]}")
    # Half the cores each: two processes of 16 threads on 16 cores starved each other's CPU work (the lease of
    # 2026-11-27: 03's reconstruction errors, 3.4 s alone, past 100 s beside 02's NER probe, the GPU idle meanwhile).
    export OMP_NUM_THREADS=$(( $(nproc) > 1 ? $(nproc) / 2 : 1 ))
    wants() { [[ " $STUDIES " == *" $1 "* ]]; }
    local scratch_pid="" krony_pid="" entity_pid=""
    log "base: lmstudy base train --scale paper --overrides \"$BASE\"; studies after it: $STUDIES"
    timeout --signal=INT --kill-after=30 "${BASE_MINUTES}m" \
        $PY -m lmstudy base train --scale paper --overrides "$BASE" >>"$out/base.log" 2>&1 &
    local base_pid=$!
    if wants 03; then
        log "beside the base: 03's scratch pretraining"
        timeout --signal=INT --kill-after=30 "${BASE_MINUTES}m" $PY -m lmstudy krony scratch \
            --scale paper "${krony_p[@]}" >>"$out/scratch.log" 2>&1 &
        scratch_pid=$!
    fi
    wait $base_pid || status=1
    log "base: trained (status $status)"
    $PY -m lmstudy base export --scale paper --overrides "$BASE" --dest "$work/models" --no-eval \
        >>"$out/base.log" 2>&1 || status=1
    log "base: exported $(ls "$work/models" | tr '\n' ' ')"
    collect "$work" "$out"

    # 03 reads the scratch pretraining last (its baselines come after its Krony runs), waiting on the run's lock if
    # the process beside the base has not finished it yet.
    local left=$((TOTAL_SECONDS - (SECONDS - start) - 40)) minutes
    minutes=$(awk -v s="$left" 'BEGIN { printf "%.2f", (s > 0 ? s : 0) / 60 }')
    log "the studies side by side, each for at most $minutes min"
    if wants 03; then
        log "03_kronecker: ${krony_p[*]}"
        WEIGHTS=none scripts/gpu_run.sh 03_kronecker "$minutes" "$work/archive/03" "${krony_p[@]}" \
            >>"$out/krony.log" 2>&1 &
        krony_pid=$!
    fi
    if wants 02; then
        log "02_entity_transformer: -p init_from $work/models/base ${ENTITY[*]}"
        WEIGHTS=none scripts/gpu_run.sh 02_entity_transformer "$minutes" "$work/archive/02" \
            -p init_from "$work/models/base" "${ENTITY[@]}" >>"$out/entity.log" 2>&1 &
        entity_pid=$!
    fi
    local pid name pid_name
    for pid_name in "$scratch_pid:03's scratch pretraining (scratch.log)" "$krony_pid:03 (krony.log)" \
                    "$entity_pid:02 (entity.log)"; do
        pid=${pid_name%%:*} name=${pid_name#*:}
        [ -n "$pid" ] || continue
        if wait "$pid"; then log "$name ended"; else status=1; log "$name failed or was stopped at its cap"; fi
    done

    collect "$work" "$out" || status=1
    log "done (status $status; results.tar.xz $(du -h "$out/results.tar.xz" | cut -f1))"
    return $status
}

# OUT/results.tar.xz of what is done so far (after each stage, so a run cut off at the device's limit still
# brings back the stages before): every run's config, metrics and log (unfinished runs' too) in the run cache's
# layout, the executed notebooks, the figures and the base's export records; no weights (0.5 GB a model).
collect() {
    local work=$1 out=$2
    mkdir -p "$work/results/runs" "$work/results/cards" "$work/results/notebooks"
    (cd "$work/runs" && find . -path ./cache -prune -o -type f \( -name config.json -o -name metrics.json \
        -o -name log.jsonl \) -print | grep -Ev '/(checkpoint|best|model|tokenizer)/' \
        | xargs -r cp --parents -t "$work/results/runs")
    for card in "$work"/models/*/; do
        [ -f "$card/lmstudy_run.json" ] && cp "$card/lmstudy_run.json" "$work/results/cards/$(basename "$card").json"
    done
    cp "$work"/runs/notebooks/*.ipynb "$work/results/notebooks/" 2>/dev/null
    cp -r "$work/figures" "$work/results/"
    tar -C "$work/results" -cJf "$out/results.tar.xz.part" . && mv "$out/results.tar.xz.part" "$out/results.tar.xz"
}

unpack() {
    local results=${1:?usage: scripts/gpu_paper_runs.sh unpack RESULTS [DEST]} dest=${2:-results/gpu/$(date -u +%F)}
    if [ -e "$dest" ]; then  # a second lease on one day gets a folder of its own (e.g. results/gpu/2026-11-27-third)
        echo "gpu_paper_runs: $dest exists; give a DEST of its own" >&2
        return 2
    fi
    mkdir -p "$dest" && tar -C "$dest" -xJf "$results" && ls "$dest"
}

case ${1:-} in
    pack) pack ;;
    run) shift; run "$@" ;;
    unpack) shift; unpack "$@" ;;
    *) echo "usage: scripts/gpu_paper_runs.sh pack | run OUT | unpack RESULTS [DEST]" >&2; exit 2 ;;
esac
