"""One worker of the shared hyperparameter search, with training replaced by a fake: what the PostgreSQL test of
test_hpsearch_postgres.py starts several of at once.

    python tests/hpsearch_worker.py STORAGE_URL N_TRIALS CALLS_FILE START_AT

Waits until the wall-clock time START_AT (so that every worker opens the study in the same instant, on a
fresh database), then runs ``run_search`` of study ``shared`` with ``N_TRIALS`` samples. Every fake training
call appends one line ``LR EMBEDDING`` to CALLS_FILE (``O_APPEND``: lines of several processes never mix) and
takes 0.2 s, so the workers overlap.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("MPLBACKEND", "agg")

import optuna  # noqa: E402

from lmstudy.welch import hpsearch  # noqa: E402


def config(storage: str, n_trials: int) -> hpsearch.SearchConfig:
    """The search every worker joins (small space, seed 0)."""
    return hpsearch.SearchConfig(study_name="shared", n_trials=n_trials, base={"domain": "news"},
                                 space=hpsearch.SearchSpace.for_hidden(64, (1, 2)), seed=0, storage=storage)


def main(storage: str, n_trials: int, calls_file: str, start_at: float) -> None:
    """Join the search at ``start_at`` and help finish it."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def fake_training(run_config) -> dict:
        with open(calls_file, "a", encoding="utf-8") as calls:
            calls.write(f"{run_config.lr!r} {run_config.embedding}\n")
        time.sleep(0.2)
        ppl = 100 + run_config.lr - (10 if "pretrained" in run_config.embedding else 0)
        return {"val_ppl": ppl, "test_ppl": ppl + 1}

    time.sleep(max(0.0, start_at - time.time()))
    hpsearch.run_search(config(storage, n_trials), run_fn=fake_training, poll_s=0.2)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
