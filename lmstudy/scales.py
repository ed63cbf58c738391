"""Scale presets: the one place where the sizes of every study live.

Every study notebook takes a ``scale`` parameter and the parameters below. ``smoke`` is what CI
runs (seconds, real data readers on slices of the real corpora), ``cpu`` is the published run
(a 2-core laptop, an hour or more in the background, resumable through the run cache) and
``paper`` is the paper's own sizes, for a GPU. A notebook's ``parameters`` cell holds exactly
its ``smoke`` preset (a test checks this), so stepping through it in JupyterLab is quick.
"""

from __future__ import annotations

SCALES = ("smoke", "cpu", "paper")

PRESETS: dict[str, dict[str, dict]] = {
    # The smallest end-to-end study: a word-level GPT-2-style LM on PTB through the shared
    # data readers, vocabulary, training loop and run cache.
    "00_quickstart": {
        "smoke": dict(
            n_layer=1, n_head=2, n_embd=32, seq_len=32, batch_size=16,
            max_steps=30, eval_every=15, lr=3e-3, train_tokens=60_000, eval_tokens=6_000, seed=0,
        ),
        "cpu": dict(
            n_layer=2, n_head=4, n_embd=128, seq_len=64, batch_size=32,
            max_steps=3_000, eval_every=250, lr=1e-3, train_tokens=0, eval_tokens=0, seed=0,
        ),
        "paper": dict(
            n_layer=12, n_head=12, n_embd=768, seq_len=256, batch_size=32,
            max_steps=20_000, eval_every=1_000, lr=3e-4, train_tokens=0, eval_tokens=0, seed=0,
        ),
    },
}


def preset(study: str, scale: str) -> dict:
    """The parameters of ``study`` at ``scale`` (a copy: callers may update it)."""
    if study not in PRESETS:
        raise KeyError(f"no scale presets for study {study!r}; studies: {', '.join(sorted(PRESETS))}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    return dict(PRESETS[study][scale])
