#!/usr/bin/env bash
# Run one study's paper preset on a GPU machine for at most MINUTES, then archive every run in the run cache, the
# unfinished ones with their latest checkpoint, so the next lease (or this machine) resumes where it stopped:
#
#   scripts/gpu_run.sh STUDY MINUTES DEST [-p KEY VALUE ...]
#   scripts/gpu_run.sh 03_kronecker 9 "$OUT/runs" -p base_overrides "{compute: 1.0e+16}"
#
# Before it: `python -m lmstudy runs restore DEST` of the previous lease's archive (the run cache is keyed by
# config: finished runs are read back, unfinished ones resume). Weights are archived for every run (a later stage
# loads them: the Krony study its base); WEIGHTS=none archives metrics, logs and configs only (what a lease can
# bring back and git can hold: a 12 x 768 model is 0.5 GB). MINUTES may have a fraction (2.5).
# The study is interrupted (SIGINT) at MINUTES so the archive step still runs inside a command time limit.
set -uo pipefail
if [ $# -lt 3 ]; then
    echo "usage: scripts/gpu_run.sh STUDY MINUTES DEST [-p KEY VALUE ...]" >&2
    exit 2
fi
study=$1 minutes=$2 dest=$3
shift 3
if ! [[ $minutes =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "gpu_run: MINUTES must be a number of minutes (e.g. 9 or 2.5), got '$minutes'" >&2
    exit 2
fi
weights=${WEIGHTS:-all}
PY=${PY:-python}
# ALLOW_CPU=1: go on without a GPU (a rehearsal of a lease's command with tiny counts: gpu_paper_runs.sh)
if [ "${ALLOW_CPU:-0}" != 1 ] && ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_run: no CUDA device visible to torch: run the paper preset on a GPU machine" >&2
    exit 2
fi
timeout --signal=INT --kill-after=30 "${minutes}m" $PY -m lmstudy study "$study" --scale paper "$@"
status=$?
if [ $status -eq 124 ]; then
    echo "gpu_run: stopped after $minutes min; archiving what is done (rerun to resume)" >&2
fi
$PY -m lmstudy runs archive --all "$dest" --unfinished --weights "$weights" || status=1
exit $status
