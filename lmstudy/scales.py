"""Scale presets: the one place where the sizes of every study live.

Every study notebook takes a ``scale`` parameter and the parameters below. ``smoke`` is what CI
runs (seconds, real data readers on slices of the real corpora), ``cpu`` is the published run
(a 2-core laptop, an hour or more in the background, resumable through the run cache) and
``paper`` is the paper's own sizes, for a GPU. A notebook's ``parameters`` cell holds exactly
its ``smoke`` preset (a test checks this), so stepping through it in JupyterLab is quick.
"""

from __future__ import annotations

SCALES = ("smoke", "cpu", "paper")

# awd-lstm-lm's PTB regularisation (Merity et al. 2017; Welch's Baseline column), the same at every scale of the
# Welch studies (01, 01b): the defaults of lmstudy.welch.study.EmbeddingInitConfig, spelled out in every preset so
# that a notebook has the same parameters at every scale (a -p override of any of them reaches the runs).
AWD_LSTM_REGULARISATION = dict(
    dropout=0.4, dropouth=0.25, dropouti=0.4, dropoute=0.1, wdrop=0.5, weight_decay=1.2e-6, grad_clip=0.25, alpha=2.0,
    beta=1.0,
)

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
    # CTRL (Keskar et al. 2019): a control-coded GPT-2 on our domains (lmstudy.ctrl). Codes: the names of
    # lmstudy.ctrl.codes.CODES; () = all of them. ``base_scale``: the shared base (lmstudy.base.study_base) that
    # ``arms`` start from: "from_base" fine-tunes it with learning rate ``lr``, "scratch" trains its architecture
    # and tokenizer from random weights with ``scratch_lr`` (same data, steps, batch and schedule;
    # lmstudy.ctrl.model.arm_config); ``init_from`` (a folder or hub id) replaces the shared base. With a base the
    # model's size and vocabulary are the base's (the n_layer/n_head/n_embd/vocab_size below are the base's, for
    # reading); base_scale="" and init_from="" train the first published model's way (own BPE, arms=[scratch]).
    "04_control_codes": {
        # Seconds: ten codes whose documents are quick to reach, 20 short documents each, the smoke base (1x32,
        # 512-id BPE, context 64), 30 steps per arm.
        "smoke": dict(
            codes=["Wikipedia", "Books", "Reviews", "News", "IRC", "Questions", "Translation",
                   "r/worldnews", "r/books", "r/television"],
            train_docs=20, eval_docs=3, max_doc_chars=2000, mixture="uniform", vocab_size=512,
            n_layer=1, n_head=2, n_embd=32, seq_len=64, init_from="", base_scale="smoke",
            arms=["from_base", "scratch"], batch_size=8, max_steps=30, eval_every=15, lr=3e-3, scratch_lr=3e-3,
            warmup_steps=0, lr_schedule="constant", mixed_precision="no", seed=0, generation_tokens=40,
            generation_seeds=[0, 1],
        ),
        # The demo checkpoint's run (issue 22): all codes (the 20 domains and Links), up to 1,000 training documents
        # each cut to 3,000 characters, 20 held-out documents per code; the cpu shared base (GPT-2 3x192, context
        # 256, 8k BPE; 3.0M parameters, ~6 MB in fp16). Per arm 1,500 steps x 16 x 256 = 6.1M training tokens, the
        # first published from-scratch run's (3,000 x 16 x 128), 100 warm-up steps, cosine decay. Learning rates:
        # scratch 2e-3, the rate the base itself was pretrained with at this size and batch (lmstudy.base, "base"
        # preset below), so the scratch arm gets a tested recipe; from_base 5e-4, a quarter of it: fine-tuning on
        # 16% of the base's token budget should adapt the weights (and teach the new code embeddings, which start
        # at the mean embedding) without a restart at full rate undoing the pretraining.
        "cpu": dict(
            codes=[], train_docs=1000, eval_docs=20, max_doc_chars=3000, mixture="uniform", vocab_size=8192,
            n_layer=3, n_head=3, n_embd=192, seq_len=256, init_from="", base_scale="cpu",
            arms=["from_base", "scratch"], batch_size=16, max_steps=1500, eval_every=250, lr=5e-4, scratch_lr=2e-3,
            warmup_steps=100, lr_schedule="cosine", mixed_precision="no", seed=0, generation_tokens=40,
            generation_seeds=[0, 1],
        ),
        # The paper's recipe on a real checkpoint (a GPU box): fine-tune GPT-2 small with the codes (init_from wins
        # over base_scale); the scratch arm trains GPT-2 small's architecture from random weights at GPT-2's usual
        # pretraining rate.
        "paper": dict(
            codes=[], train_docs=0, eval_docs=200, max_doc_chars=0, mixture="uniform", vocab_size=0,
            n_layer=12, n_head=12, n_embd=768, seq_len=256, init_from="gpt2", base_scale="paper",
            arms=["from_base", "scratch"], batch_size=32, max_steps=20000, eval_every=1000, lr=1e-4, scratch_lr=6e-4,
            warmup_steps=500, lr_schedule="cosine", mixed_precision="bf16", seed=0, generation_tokens=40,
            generation_seeds=[0, 1],
        ),
    },
    # Welch et al. 2020: AWD-LSTM embedding initialisation (lmstudy.welch.study).
    "01_embedding_init": {
        # Seconds on a slice of PTB: tiny model, a handful of steps, vectors from 2,000 sentences.
        "smoke": dict(
            emb_size=16, hidden_size=32, n_layers=2, batch_size=8, bptt=20, eval_batch_size=4, test_batch_size=4, lr=10.0,
            max_epochs=2, max_steps=24, evals_per_epoch=2, nonmono=1, train_tokens=8_000, eval_tokens=1_000,
            vector_epochs=1, pretrain_sentences=2_000, **AWD_LSTM_REGULARISATION,
            # notebook-only keys (not run-config fields): which grid to run
            configs="standard_vs_ours", seeds=[0], settings=["Std", "Std-news", "Rare"], section3_seeds=[],
            split_v1_table="",  # Table 1 on the v1 splits to compare with (a CSV in figures/), "" = none
            # the freezing trend (lmstudy.welch.trend): its seeds ([] = none), training tokens, epoch cap, early
            # stopping after this many evaluations without improvement, the lengths it is read at, its data settings
            trend_seeds=[0], trend_train_tokens=1_000, trend_epoch_cap=3, trend_stop_after=1, trend_lengths=[1, 3],
            trend_settings=["Std-news", "Rare"],
        ),
        # The published scale: Table 1 (20 configs x Std/Std-news/Rare) plus two more seeds of the six Section 3 configs
        # = 96 runs (run times: docs/study-01-embedding-init.md): 2 layers, 64-d embeddings, the first ~200k training
        # tokens (the low-data regime where in-domain vectors matter most), 2 epochs, valid/test cut to ~20k tokens.
        "cpu": dict(
            emb_size=64, hidden_size=256, n_layers=2, batch_size=20, bptt=35, eval_batch_size=10, test_batch_size=10,
            lr=30.0,
            max_epochs=2, max_steps=0, evals_per_epoch=3, nonmono=2, train_tokens=200_000, eval_tokens=20_000,
            vector_epochs=5, pretrain_sentences=0, **AWD_LSTM_REGULARISATION,
            # Std-news and Rare only since split format 2: PTB (Std) keeps its official split, so its column stays the
            # v1 run's (figures/01_embedding_init_table1_splits_v1.csv, docs/study-01-embedding-init.md); news' splits
            # changed.
            configs="all", seeds=[0], settings=["Std-news", "Rare"], section3_seeds=[1, 2],  # notebook-only keys
            split_v1_table="01_embedding_init_table1_splits_v1.csv",
            # The trend (issue 23): the same 2x256 model on the first 100k training tokens (half of Table 1's: ~34 s
            # an epoch, so 24 runs of up to 40 epochs fit ~5 h of two one-thread workers), read at 2, 6 and 40 epochs.
            trend_seeds=[0, 1, 2], trend_train_tokens=100_000, trend_epoch_cap=40, trend_stop_after=3,
            trend_lengths=[2, 6, 40], trend_settings=["Std-news", "Rare"],
        ),
        # The paper: awd-lstm-lm's PTB recipe (3 x 1150, 400-d embeddings, Welch's Baseline column).
        "paper": dict(
            emb_size=400, hidden_size=1150, n_layers=3, batch_size=20, bptt=70, eval_batch_size=10, test_batch_size=1,
            lr=30.0, nonmono=5, max_epochs=500, max_steps=0, evals_per_epoch=1, train_tokens=0, eval_tokens=0,
            vector_epochs=5, pretrain_sentences=0, **AWD_LSTM_REGULARISATION,
            configs="all", seeds=[0], settings=["Std", "Std-news", "Rare"], section3_seeds=[1, 2],  # notebook-only keys
            split_v1_table="",
            trend_seeds=[0, 1, 2], trend_train_tokens=0, trend_epoch_cap=500, trend_stop_after=5,
            trend_lengths=[2, 50, 500], trend_settings=["Std-news", "Rare"],
        ),
    },
    # Stylianou & Vlahavas 2020, Entity-Transformers: GPT2E vs GPT2 (and two GPT2E ablations) fine-tuned from the
    # shared base (lmstudy.entity.config; ``base_scale``: lmstudy.base.study_base's scale; ``init_from``: real GPT-2
    # weights instead, a path or hub id) on GUM + LitBank coreference. ``budgets``: the trend's fine-tuning steps,
    # kept checkpoints of one run per model and seed that lasts the last of them (warm-up, then a constant
    # learning rate); ``seeds`` for GPT2 and GPT2E, ``ablation_seeds`` for the ablations (and their GPT2E).
    "02_entity_transformer": {
        # Seconds: the smoke shared base (1x32, 512-id BPE), 4 training documents per corpus, 8 steps, 2 seeds.
        "smoke": dict(
            base_scale="smoke", init_from="", corpora=["gum", "litbank"], train_docs=4, eval_docs=2, seq_len=64,
            batch_size=4, budgets=[2, 4, 8], lr=1e-3, warmup_steps=2, eval_every=4, seeds=[0, 1],
            ablation_seeds=[0, 1], mixed_precision="no", lambada_examples=20, timing_steps=4, similarity_docs=2,
            tsne_entities=5, ner_corpus="litbank", ner_train_docs=2, ner_eval_docs=1, ner_hidden=16, ner_epochs=2,
            ner_lr=0.01, ner_batch_size=32, max_doc_tokens=0, entity_top_layers=0, trained_top_layers=0,
        ),
        # The published run: the cpu shared base (3x192, context 256, 8k BPE), every GUM + LitBank document (445k
        # training sub-tokens, 62k dev, 64k test with the base's BPE), batch 8 x 256 (239 steps a pass over the training
        # documents); budgets 60, 240 and 960 steps (0.25, 1 and 4 passes: 123k, 492k, 1.97M positions), validation
        # every 60; 3 seeds x (GPT2, GPT2E) and 3 seeds x 2 ablations (run times: docs/study-02-entity-transformers.md).
        "cpu": dict(
            base_scale="cpu", init_from="", corpora=["gum", "litbank"], train_docs=0, eval_docs=0, seq_len=256,
            batch_size=8, budgets=[60, 240, 960], lr=5e-4, warmup_steps=30, eval_every=60, seeds=[0, 1, 2],
            ablation_seeds=[0, 1, 2], mixed_precision="no", lambada_examples=1500, timing_steps=20,
            similarity_docs=0, tsne_entities=10, ner_corpus="litbank", ner_train_docs=0, ner_eval_docs=0,
            ner_hidden=64, ner_epochs=4, ner_lr=0.001, ner_batch_size=32, max_doc_tokens=0,
            entity_top_layers=0, trained_top_layers=0,
        ),
        # GPT-2 small from real weights on a GPU, the paper's learning rate; all documents and LAMBADA passages.
        # Batch 8 x 512 GPT-2 sub-tokens (~120 steps a pass); budgets 125, 500 and 2,000 steps (1, 4 and 16
        # passes; the paper's 1e5 steps of batch 1 on CoNLL-2012 are a similar number of passes).
        "paper": dict(
            base_scale="paper", init_from="gpt2", corpora=["gum", "litbank"], train_docs=0, eval_docs=0,
            seq_len=512, batch_size=8, budgets=[125, 500, 2000], lr=2e-5, warmup_steps=100, eval_every=125,
            seeds=[0, 1, 2], ablation_seeds=[0, 1, 2], mixed_precision="bf16", lambada_examples=0, timing_steps=50,
            similarity_docs=0, tsne_entities=10, ner_corpus="litbank", ner_train_docs=0, ner_eval_docs=0,
            ner_hidden=512, ner_epochs=20, ner_lr=1e-4, ner_batch_size=32, max_doc_tokens=0,
            entity_top_layers=0, trained_top_layers=0,
        ),
    },
    # Welch et al. 2020, Section 3 + appendix (lmstudy.welch.extended, lmstudy.welch.hpsearch, lmstudy.welch.ngram):
    # Tables 2, 3, 5, 6, 7, Figure 1 and the six configurations on a word-level GPT-2. Run fields as in
    # 01_embedding_init; notebook-only keys: configs ("section3" | "pair"), seeds, domains (Table 2),
    # unk_cutoffs (3), vector_sources (5), train_multiples (6), search_* (Figure 1), ngram_order and
    # transformer (Table 7 and beyond the paper).
    "01b_embedding_init_extended": {
        # Seconds: news only (its token cache is the one notebook 01 builds too), the standard approach
        # vs ours, a tiny model for 8 steps, two K, two data sizes, a 3-trial search.
        "smoke": dict(
            domain="news", emb_size=16, hidden_size=32, n_layers=2, batch_size=8, bptt=20, eval_batch_size=4,
            test_batch_size=4, lr=10.0, max_epochs=1, max_steps=8, evals_per_epoch=1, nonmono=1,
            train_tokens=4_000, eval_tokens=1_000, vector_epochs=1, pretrain_sentences=1_000, **AWD_LSTM_REGULARISATION,
            configs="pair", seeds=[0], base_seeds=[], domains=["news"], unk_cutoffs=[0, 5], vector_sources=["news"],
            train_multiples=[1, 2], search_domain="news", search_trials=3, search_nlayers=[1, 2], ngram_order=3,
            transformer=dict(n_layer=1, n_head=2, n_embd=16, seq_len=32, batch_size=8, max_steps=8, eval_every=8,
                             lr=3e-3),
        ),
        # The published run: AWD-LSTM 2x256, 64-d embeddings, the first 100k train tokens, 2 epochs; Table 2 on news,
        # books, irc, Table 3 K=0,1,2,5, Table 5 three vector sources, Table 6 1x/2x/4x data, a 10-trial search, Table 7
        # and the word-level GPT-2 (run times: docs/study-01b-embedding-init-extended.md). Train tokens are half of
        # notebook 01's cpu preset, so its runs are not shared.
        "cpu": dict(
            domain="news", emb_size=64, hidden_size=256, n_layers=2, batch_size=20, bptt=35, eval_batch_size=10,
            test_batch_size=10, lr=30.0, max_epochs=2, max_steps=0, evals_per_epoch=3, nonmono=2, train_tokens=100_000,
            eval_tokens=20_000, vector_epochs=5, pretrain_sentences=0, **AWD_LSTM_REGULARISATION,
            configs="section3", seeds=[0], base_seeds=[1, 2], domains=["news", "books", "irc"],
            unk_cutoffs=[0, 1, 2, 5],
            vector_sources=["news", "wikipedia", "books"], train_multiples=[1, 2, 4], search_domain="news",
            search_trials=10, search_nlayers=[2, 3], ngram_order=5,
            transformer=dict(n_layer=2, n_head=4, n_embd=64, seq_len=64, batch_size=16, max_steps=300,
                             eval_every=100, lr=1e-3),
        ),
        # The paper's sizes (a GPU box): awd-lstm-lm's PTB recipe, six configurations, three seeds, all domains,
        # 37 search trials within the appendix's bounds, a 12 x 768 GPT-2.
        "paper": dict(
            domain="news", emb_size=400, hidden_size=1150, n_layers=3, batch_size=20, bptt=70, eval_batch_size=10,
            test_batch_size=1, lr=30.0, nonmono=5, max_epochs=500, max_steps=0, **AWD_LSTM_REGULARISATION,
            evals_per_epoch=1, train_tokens=0, eval_tokens=0, vector_epochs=5, pretrain_sentences=0,
            configs="section3", seeds=[0, 1, 2], base_seeds=[],
            domains=["news", "books", "imdb", "irc", "reddit", "wikipedia"],
            unk_cutoffs=[0, 1, 2, 5], vector_sources=["news", "wikipedia", "books"], train_multiples=[1, 2, 4],
            search_domain="news", search_trials=37, search_nlayers=[2, 5], ngram_order=5,
            transformer=dict(n_layer=12, n_head=8, n_embd=400, seq_len=256, batch_size=32, max_steps=20_000,
                             eval_every=1_000, lr=3e-4),
        ),
    },
    # Krony-PT (Ayoub 2024) on the shared base (lmstudy.krony.config). Classes are the paper's factor shapes for our
    # dims (96M: B=(2,1), 81M: B=(4,1), 67M: tiny balanced factors); the trend (compare_class vs its distilled and scratch same-size models, ``seeds``)
    # starts from each base checkpoint in ``fractions``; the grid and Table 6 from the last, seed 0.
    # ``base_overrides``: changes to the shared base's preset ("base" below), e.g. a dry run's budget; {} = none.
    # ``finetune_tokens``: every model's continued-training budget; the evaluation slices are the protocol's
    # (lmstudy.evaluation.EvalConfig; ``domains`` None = all held-out domains).
    "03_kronecker": {
        # Seconds: the smoke base (1x32, 20 steps), 4 steps of continued training, two seeds.
        "smoke": dict(
            base_scale="smoke", fractions=[0.1, 0.3, 1.0], classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], compare_class="81M", seeds=[0, 1], finetune_tokens=2048,
            finetune_lr=1e-3, evals_per_run=2, val_tokens=0, table6_class="67M", table6_factors=[1, 2, 4],
            distill_alpha=0.9, distill_temperature=2.0, wikitext_tokens=2000, lambada_examples=20, domains=["news"],
            domain_documents=2, eval_batch_size=8, base_overrides={},
        ),
        # The published run: the 3x192 shared base (37.5M tokens at 100%), 80 steps x 16 x 256 = 327,680 tokens of
        # continued training per model (0.87% of the base's budget), three seeds in the trend; evaluation slices: 50k
        # WikiText-2 tokens, 500 LAMBADA passages, 10 test documents per held-out domain (run times:
        # docs/study-03-krony-pt.md).
        "cpu": dict(
            base_scale="cpu", fractions=[0.1, 0.3, 1.0], classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], compare_class="81M", seeds=[0, 1, 2], finetune_tokens=327_680,
            finetune_lr=1e-3, evals_per_run=2, val_tokens=30_000, table6_class="67M", table6_factors=[1, 2, 4],
            distill_alpha=0.9, distill_temperature=2.0, wikitext_tokens=50_000, lambada_examples=500, domains=None,
            domain_documents=10, eval_batch_size=8, base_overrides={},
        ),
        # GPT-2 small's dims on a GPU (the paper-scale shared base, 1.17B tokens): ~10% of the base's tokens of
        # continued training, the paper's fine-tuning share; the whole test sets.
        "paper": dict(
            base_scale="paper", fractions=[0.1, 0.3, 1.0], classes=["96M", "81M", "67M"],
            inits=["van_loan", "prune", "random"], compare_class="81M", seeds=[0, 1, 2], finetune_tokens=117_000_000,
            finetune_lr=3e-4, evals_per_run=5, val_tokens=0, table6_class="67M", table6_factors=[1, 2, 4],
            distill_alpha=0.9, distill_temperature=2.0, wikitext_tokens=0, lambada_examples=0, domains=None,
            domain_documents=20, eval_batch_size=16, base_overrides={},
        ),
    },
    # The shared base models (lmstudy.base): one BPE and one GPT-2 pretrained on every domain's
    # pretraining split, reused by the transformer studies. ``compute`` is the final run's budget in
    # training FLOPs; its token budget is compute / flops_per_token(model). The sweep trains each of
    # ``sweep_sizes`` ([n_layer, n_head, n_embd]) with ``sweep_fraction`` of that compute.
    "base": {
        # Seconds: 20 documents a domain, a 512-id BPE, 1x32 model, ~20 steps.
        "smoke": dict(
            data=dict(vocab_size=512, tokenizer_sample=1.0, data_fraction=0.0005, valid_tokens_per_domain=2000),
            model=dict(n_layer=1, n_head=2, n_embd=32, seq_len=64), compute=2e9, batch_size=8, lr=3e-3, compile=False,
            mixed_precision="no", sweep_sizes=[[1, 2, 16], [1, 2, 32]], sweep_fraction=0.5, sweep_batch_size=8,
            sweep_data_fraction=0.0005,
        ),
        # About 2.5 h of the 2-core machine (7.2e14 FLOPs; run times: docs/base-models.md). The model is the sweep's
        # choice (3x192: ~20 tokens per parameter at this budget, lmstudy.base_sweep.choose_size). 8k BPE (why:
        # docs/base-models.md, "Tokenizer"); context 256; sweep at 1/50 of the compute per size (batch 8: enough steps
        # for the largest size), on the first 10% of each domain's pretraining text (every sweep run sees fresh text
        # only).
        "cpu": dict(
            data=dict(vocab_size=8192, tokenizer_sample=0.1, data_fraction=1.0, valid_tokens_per_domain=20_000),
            model=dict(n_layer=3, n_head=3, n_embd=192, seq_len=256), compute=7.2e14, batch_size=16, lr=2e-3, compile=True,
            mixed_precision="no", sweep_sizes=[[2, 2, 128], [3, 3, 192], [4, 4, 256], [6, 5, 320]], sweep_fraction=0.02,
            sweep_batch_size=8, sweep_data_fraction=0.1,
        ),
        # GPT-2 small's dims for a GPU: 12x768, the GPT-2-sized vocabulary, context 1024, ~1e18 FLOPs
        # (~2.6B tokens; more than our ~100M-token stream holds: it repeats); bf16 autocast, as GPU pretraining is run.
        "paper": dict(
            data=dict(vocab_size=50257, tokenizer_sample=0.1, data_fraction=1.0, valid_tokens_per_domain=100_000),
            model=dict(n_layer=12, n_head=12, n_embd=768, seq_len=1024), compute=1e18, batch_size=32, lr=6e-4, compile=True,
            mixed_precision="bf16", sweep_sizes=[[6, 8, 512], [12, 12, 768], [12, 16, 1024]], sweep_fraction=0.01,
            sweep_batch_size=32, sweep_data_fraction=1.0,
        ),
    },
}

# Study 04 on SmolLM2 (issue 48; lmstudy.ctrl.smol_ctrl, `python -m lmstudy ctrl train-smol`): the fetched
# SmolLM2-135M + the 21 codes, a LoRA (rank lora_r) + the code rows trained on the same 21-domain mixture as the
# study's cpu preset, one arm (from_base: SmolLM2 from random weights is no CPU run), one run per seed in
# ``seeds`` (verdicts that rest on training need three). cpu: 500 steps x 8 x 256 = 1.02M coded tokens a seed,
# about 40 minutes on the 2-core machine under bf16 autocast (the LoRA-vs-full benchmark's 450-500 tokens/s), so
# the three seeds fit the 2.5 h of a cpu run; lr 2e-3 is the benchmark's LoRA rate. eval_docs=3: the training
# loop's held-out check only (fp32 SmolLM2 forward passes over 21 codes cost ~1.5 min each); the study's
# evaluation reads its own 20 documents a code. The keys are ControlConfig fields plus ``seeds``.
SMOLLM2_CTRL: dict[str, dict] = {
    # Seconds: four codes, a few short documents, 4 steps of 2 x 64 (SmolLM2 itself must be fetched).
    "smoke": dict(codes=["Wikipedia", "Books", "Reviews", "News"], train_docs=6, eval_docs=2, max_doc_chars=1000,
                  mixture="uniform", seq_len=64, init_from="smollm2", base_scale="", lora_r=8, batch_size=2,
                  max_steps=4, eval_every=2, lr=2e-3, warmup_steps=0, lr_schedule="constant", mixed_precision="no",
                  seeds=[0]),
    "cpu": dict(codes=[], train_docs=1000, eval_docs=3, max_doc_chars=3000, mixture="uniform", seq_len=256,
                init_from="smollm2", base_scale="", lora_r=8, batch_size=8, max_steps=500, eval_every=250, lr=2e-3,
                warmup_steps=25, lr_schedule="cosine", mixed_precision="bf16", seeds=[0, 1, 2]),
    # A GPU box: the same recipe, 6x the tokens a seed (3,000 steps x 8 x 256), the full 20 documents checked.
    "paper": dict(codes=[], train_docs=0, eval_docs=20, max_doc_chars=3000, mixture="uniform", seq_len=256,
                  init_from="smollm2", base_scale="", lora_r=8, batch_size=8, max_steps=3000, eval_every=500,
                  lr=2e-3, warmup_steps=100, lr_schedule="cosine", mixed_precision="bf16", seeds=[0, 1, 2]),
}

# Krony-PT on SmolLM2 (lmstudy.krony.smol, `python -m lmstudy krony smol`): SmolKronyConfig fields. Evaluation
# slices are smaller than the GPT-2 study's (a SmolLM2 forward pass costs ~40x our cpu base's); windows of 1,024.
SMOLLM2_KRONY: dict[str, dict] = {
    # Seconds: 3 steps of 2 x 32 on a few hundred documents; the model must be given (init_from: a tiny Llama folder
    # in the tests, or the fetched smollm2).
    "smoke": dict(finetune_tokens=192, init_from="smollm2", seeds=[0, 1], data_fraction=0.0005, batch_size=2,
                  seq_len=32, finetune_lr=1e-3, evals_per_run=1, valid_tokens_per_domain=500, val_tokens=200,
                  mixed_precision="no", table6_factors=[1, 2], eval_seq_len=64, wikitext_tokens=300, lambada_examples=5, domains=["news"],
                  domain_documents=1, eval_batch_size=2),
    # The 2-core machine: 40 steps x 8 x 256 = 81,920 tokens of continued training a model (the central comparison:
    # 11 trained models, about an hour alone on the machine). Table 6 at the 81M class, whose own shape has 3
    # factors: 1, 2 and 3 of them (each factor of A = (192, 576) costs 10M parameters over the 30 blocks; the 67M
    # class's A = (384, 576) would reach SmolLM2's own size at 4 factors).
    "cpu": dict(finetune_tokens=81_920, init_from="smollm2", seeds=[0, 1, 2], data_fraction=0.02, batch_size=8,
                seq_len=256, finetune_lr=3e-4, evals_per_run=2, valid_tokens_per_domain=3_000, val_tokens=0,
                mixed_precision="bf16", table6_class="81M", table6_factors=[1, 2, 3], eval_seq_len=1024, wikitext_tokens=20_000, lambada_examples=500,
                domains=None, domain_documents=5, eval_batch_size=4),
}

# Study 02 on SmolLM2 (issue 50; `python -m lmstudy study 02_entity_transformer --scale cpu --model smollm2`): what
# differs from the study's own preset at that scale. Every model is SmolLM2-135M as a LlamaE (entity sub-layers in the
# top ``entity_top_layers`` decoder layers) or its plain twin, only the top ``trained_top_layers`` layers trained in
# both arms (the frozen 26 cost one forward pass; a step of the top 4 costs about 1.5x a forward pass of the whole
# model: the whole model trained would be about 3x). cpu: GUM + LitBank train is 386k SmolLM2 tokens, 189 steps of
# 8 x 256 a pass; budgets 50, 100, 200 steps (a quarter, a half and one pass: 102k-410k positions), validation every
# 50; lr 1e-4 (five times the paper's 2e-5 for a whole GPT-2: four blocks for 200 steps, not all for 1e5); bf16
# autocast in the training step (evaluation stays fp32, the shared protocol's); 500 LAMBADA passages; the
# ablations one seed (each costs a GPT2E run); the NER probe on 40 of LitBank's 80 training documents (every dev and
# test one): its features are an fp32 forward pass of six models. The run spans two stages of about 2.5 hours.
SMOLLM2_ENTITY: dict[str, dict] = {
    # Seconds: the smoke preset on the fetched SmolLM2 (the tests give a tiny Llama folder as init_from).
    "smoke": dict(init_from="smollm2", entity_top_layers=1, trained_top_layers=1, budgets=[1, 2], eval_every=2,
                  warmup_steps=1, seeds=[0], ablation_seeds=[0], lambada_examples=5, max_doc_tokens=128,
                  timing_steps=2),
    "cpu": dict(init_from="smollm2", entity_top_layers=4, trained_top_layers=4, budgets=[50, 100, 200],
                eval_every=50, lr=1e-4, warmup_steps=20, seeds=[0, 1, 2], ablation_seeds=[0], mixed_precision="bf16",
                lambada_examples=500, timing_steps=10, ner_train_docs=40),
    # A GPU: the paper's full fine-tune (entity sub-layers in all 30 layers, every weight trained) with the study's
    # paper preset otherwise (budgets 125-2,000 steps of 8 x 512, lr 2e-5, 3 seeds, all of LAMBADA).
    "paper": dict(init_from="smollm2"),
}

# The pretrained models a study notebook runs on besides its own base (`python -m lmstudy study NAME --model M`):
# notebook -> model -> scale -> the parameters laid over that scale's preset.
MODEL_PRESETS: dict[str, dict[str, dict[str, dict]]] = {
    "02_entity_transformer": {"smollm2": SMOLLM2_ENTITY},
}

# Notebook parameters that are not sizes, the same at every scale (their default in the parameters cell): notebook
# 04 evaluates an exported model instead of training when given one (checkpoint), and its repetition sweep
# continues every neutral prompt unless told fewer (sweep_prompts; the paper dry run uses one).
NOTEBOOK_OPTIONS: dict[str, dict] = {
    "04_control_codes": {"checkpoint": "", "sweep_prompts": 0},
}


def preset(study: str, scale: str, model: str = "") -> dict:
    """The parameters of ``study`` at ``scale`` (a copy: callers may update it); ``model``: with that pretrained
    model's parameters (:func:`model_preset`) laid over them."""
    if study not in PRESETS:
        raise KeyError(f"no scale presets for study {study!r}; studies: {', '.join(sorted(PRESETS))}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    return {**PRESETS[study][scale], **(model_preset(study, scale, model) if model else {})}


def model_preset(study: str, scale: str, model: str) -> dict:
    """What ``study`` at ``scale`` changes of its preset to run on the pretrained ``model`` (:data:`MODEL_PRESETS`)."""
    models = MODEL_PRESETS.get(study, {})
    if model not in models:
        raise ValueError(f"study {study!r} has no preset for model {model!r}; its models: "
                         f"{', '.join(sorted(models)) or '(none)'}")
    if scale not in models[model]:
        raise ValueError(f"study {study!r} on {model} has no {scale!r} preset; scales: {', '.join(models[model])}")
    return dict(models[model][scale])
