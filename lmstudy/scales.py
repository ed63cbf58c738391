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
    # CTRL (Keskar et al. 2019): a control-coded GPT-2 trained from scratch on our domains
    # (lmstudy.control). Codes: the names of lmstudy.control.codes.CODES; () = all 20.
    "04_control_codes": {
        # Seconds: ten codes whose documents are quick to reach, 20 short documents each, 30 steps.
        "smoke": dict(
            codes=["Wikipedia", "Books", "Reviews", "News", "IRC", "Questions", "Translation",
                   "r/worldnews", "r/books", "r/television"],
            train_docs=20, eval_docs=3, max_doc_chars=2000, mixture="uniform", vocab_size=1024,
            n_layer=1, n_head=2, n_embd=64, seq_len=64, init_from="",
            batch_size=8, max_steps=30, eval_every=15, lr=3e-3, warmup_steps=0, lr_schedule="constant", seed=0,
        ),
        # The published run and demo checkpoint: all 20 codes, up to 1,000 training documents each
        # cut to 3,000 characters, 20 held-out documents per code; GPT-2 4x256 with an 8k BPE: 5.3M
        # parameters, 10.6 MB in fp16. 3,000 steps x 16 x 128 = 6.1M training tokens: one torch thread
        # takes ~1.4 s a step on the 2-core machine, so training is ~75 min and leaves the other core free.
        "cpu": dict(
            codes=[], train_docs=1000, eval_docs=20, max_doc_chars=3000, mixture="uniform", vocab_size=8192,
            n_layer=4, n_head=4, n_embd=256, seq_len=128, init_from="",
            batch_size=16, max_steps=3000, eval_every=500, lr=1e-3, warmup_steps=200, lr_schedule="cosine", seed=0,
        ),
        # The paper's recipe on a real checkpoint (a GPU box): fine-tune GPT-2 small with the codes.
        "paper": dict(
            codes=[], train_docs=0, eval_docs=200, max_doc_chars=0, mixture="uniform", vocab_size=0,
            n_layer=12, n_head=12, n_embd=768, seq_len=256, init_from="gpt2",
            batch_size=32, max_steps=20000, eval_every=1000, lr=1e-4, warmup_steps=500, lr_schedule="cosine",
            mixed_precision="bf16", seed=0,
        ),
    },
    # Welch et al. 2020: AWD-LSTM embedding initialisation (lmstudy.studies.embedding_init).
    "01_embedding_init": {
        # Seconds on a slice of PTB: tiny model, a handful of steps, vectors from 2,000 sentences.
        "smoke": dict(
            emb_size=16, hidden_size=32, n_layers=2, batch_size=8, bptt=20, eval_batch_size=4, test_batch_size=4, lr=10.0,
            max_epochs=2, max_steps=24, evals_per_epoch=2, nonmono=1, train_tokens=8_000, eval_tokens=1_000,
            vector_epochs=1, pretrain_sentences=2_000,
            # notebook-only keys (not run-config fields): which grid to run
            configs="standard_vs_ours", seeds=[0], settings=["Std", "Rare"], section3_seeds=[],
        ),
        # Proposed published scale, sized so that Table 1 (20 configs x Std/Rare) plus two more seeds of the
        # six Section 3 configs (~52 runs) fit ~4 hours on the 2-core machine (see the report): 2 layers,
        # 64-d embeddings, the first ~200k training tokens (the low-data regime where in-domain vectors
        # matter most), 2 epochs, valid/test cut to ~20k tokens.
        "cpu": dict(
            emb_size=64, hidden_size=256, n_layers=2, batch_size=20, bptt=35, eval_batch_size=10, test_batch_size=10,
            lr=30.0,
            max_epochs=2, evals_per_epoch=3, nonmono=2, train_tokens=200_000, eval_tokens=20_000,
            configs="all", seeds=[0], settings=["Std", "Rare"], section3_seeds=[1, 2],  # notebook-only keys
        ),
        # The paper: awd-lstm-lm's PTB recipe (3 x 1150, 400-d embeddings, Welch's Baseline column).
        "paper": dict(
            emb_size=400, hidden_size=1150, n_layers=3, dropout=0.4, dropouth=0.25, dropouti=0.4,
            dropoute=0.1, wdrop=0.5, batch_size=20, bptt=70, eval_batch_size=10, test_batch_size=1, lr=30.0,
            weight_decay=1.2e-6, grad_clip=0.25, alpha=2.0, beta=1.0, nonmono=5, max_epochs=500,
            configs="all", seeds=[0], settings=["Std", "Rare"], section3_seeds=[1, 2],  # notebook-only keys
        ),
    },
    # Krony-PT (Ayoub 2024): Kronecker-factored MLPs of a small GPT-2 we pretrain ourselves
    # (lmstudy.studies.kronecker). Classes are the paper's factor shapes for our dims (96M: B=(2,1),
    # 81M: B=(4,1), 67M: tiny balanced factors); Table 6 uses the 67M shapes.
    "03_kronecker": {
        # Seconds: 2x32 GPT-2, a 512-id BPE on 40 Wikipedia documents, 30 + 10 steps.
        "smoke": dict(
            vocab_size=512, train_docs=40, valid_docs=5, n_layer=2, n_head=2, n_embd=32, seq_len=64,
            batch_size=8, pretrain_steps=30, lr=3e-3, classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], finetune_steps=10, finetune_lr=1e-3, eval_every=10,
            table6_class="67M", table6_factors=4, dense_baseline=True, wikitext_tokens=2000,
            lambada_examples=30, seed=0,
        ),
        # Proposed (not yet timed on the 2-core machine): 4x256 GPT-2 with an 8k BPE on 5,000 documents.
        "cpu": dict(
            vocab_size=8192, train_docs=5000, valid_docs=100, n_layer=4, n_head=4, n_embd=256, seq_len=128,
            batch_size=16, pretrain_steps=4000, lr=1e-3, classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], finetune_steps=1000, finetune_lr=3e-4, eval_every=250,
            table6_class="67M", table6_factors=4, dense_baseline=True, wikitext_tokens=0,
            lambada_examples=0, seed=0,
        ),
        # GPT-2 small's dims (a GPU box), still pretrained here: no pretrained weights exist in lmstudy.
        "paper": dict(
            vocab_size=50257, train_docs=0, valid_docs=500, n_layer=12, n_head=12, n_embd=768, seq_len=1024,
            batch_size=32, pretrain_steps=50000, lr=6e-4, classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], finetune_steps=10000, finetune_lr=1e-4, eval_every=1000,
            table6_class="67M", table6_factors=4, dense_baseline=True, wikitext_tokens=0,
            lambada_examples=0, seed=0,
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
