#!/usr/bin/env bash
# Run one study's paper preset on a GPU machine for at most MINUTES, then archive every run in the run cache, the
# unfinished ones with their latest checkpoint, so the next lease (or this machine) resumes where it stopped:
#
#   scripts/gpu_run.sh STUDY MINUTES DEST [-p KEY VALUE ...]
#   scripts/gpu_run.sh 03_kronecker 9 "$OUT/runs" -p base_overrides "{compute: 1.0e+16}"
#
# Before it: `python -m lmstudy runs restore DEST` of the previous lease's archive (the run cache is keyed by
# config: finished runs are read back, unfinished ones resume). Weights are archived for every run (a later stage
# loads them: the Krony study its base); commit only what fits (`runs archive --weights none` for metrics and logs).
# The study is interrupted (SIGINT) at MINUTES so the archive step still runs inside a command time limit.
set -uo pipefail
if [ $# -lt 3 ]; then
    echo "usage: scripts/gpu_run.sh STUDY MINUTES DEST [-p KEY VALUE ...]" >&2
    exit 2
fi
study=$1 minutes=$2 dest=$3
shift 3
case $minutes in
    ''|*[!0-9]*) echo "gpu_run: MINUTES must be a whole number, got '$minutes'" >&2; exit 2 ;;
esac
PY=${PY:-python}
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_run: no CUDA device visible to torch: run the paper preset on a GPU machine" >&2
    exit 2
fi
timeout --signal=INT --kill-after=60 "$((minutes * 60))" $PY -m lmstudy study "$study" --scale paper "$@"
status=$?
if [ $status -eq 124 ]; then
    echo "gpu_run: stopped after $minutes min; archiving what is done (rerun to resume)" >&2
fi
$PY -m lmstudy runs archive --all "$dest" --unfinished --weights all || status=1
exit $status
