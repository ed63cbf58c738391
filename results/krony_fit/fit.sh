#!/bin/bash
# Issue 20's fit, second layout: the study beside `krony baselines`, from the shipped base and the archived scratch pretraining.
cd /work/main
export LMSTUDY_DATA=/work/shared/data LMSTUDY_RUNS=/work/fit/runs HF_HUB_OFFLINE=1 TQDM_MININTERVAL=30 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=.venv/bin/python
echo "fit2_start $(date -u +%FT%TZ)" >> /work/fit/times.txt
( /usr/bin/time -v $PY -m lmstudy krony baselines --scale cpu > /work/fit/baselines.log 2>&1; echo "baselines_end $(date -u +%FT%TZ) rc=$?" >> /work/fit/times.txt ) &
( /usr/bin/time -v $PY -m lmstudy study 03_kronecker --scale cpu > /work/fit/study3.log 2>&1; echo "study3_end $(date -u +%FT%TZ) rc=$?" >> /work/fit/times.txt ) &
wait
echo "fit2_end $(date -u +%FT%TZ)" >> /work/fit/times.txt
