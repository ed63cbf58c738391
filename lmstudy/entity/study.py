"""02_entity_transformer: the Entity-Transformer (Stylianou & Vlahavas 2020) at our scale: GPT2E vs GPT2.

The paper fine-tunes GPT-2 small with and without Entity-Transformer blocks on CoNLL-2012 with gold
coreference, then compares perplexity (CoNLL test, LAMBADA), time per step, mention-representation
similarity (Table 4), t-SNE pictures and a NER probe (Table 5). Our pipeline:

1. Base model. ``cpu``/``smoke``: the small GPT-2 pretrained on our Wikipedia split, Krony-PT's base too
   (:func:`lmstudy.wiki_base.pretrain_base`, the ``wiki_base`` preset of ``base_scale``; general English, disjoint
   from GUM, LitBank and LAMBADA), with its byte-level BPE; the same cached run serves both studies.
   ``paper``: real GPT-2 weights from ``init_from`` (a path or hub id; its tokenizer, else GPT-2's BPE from
   the data dir).
2. Two models from identical weights: GPT2E = :meth:`GPT2E.from_gpt2` (entity attention in every block, zero
   output projection, so it starts as exactly the base) and GPT2 = the same with ``entity_layers=[]``.
   Both are fine-tuned with the same data, steps, schedule and seed (:func:`finetune_run`, cached), for every
   seed in ``seeds``. The seed sets the new entity weights, the document order and dropout.
3. Data (:func:`study_documents`): OntoGUM coreference (GUM's official train/dev/test; the 18 reddit documents
   are masked in the release and left out) plus LitBank (the reader's fixed 80/10/10 document split), both
   encoded by :func:`lmstudy.entity.data.encode_coref_document`. ``coref test`` perplexity is GUM test +
   LitBank test read with the entity memory (:func:`entity_stream_loss`); for GPT2E also with every entity id
   null (``test_ppl_no_entities``: how much the entity information itself is worth at test time).
4. LAMBADA (OpenAI's detokenized test set, ``lambada_examples`` passages): the shared protocol
   (:func:`lmstudy.evaluation.lambada_scores`: last-word per-token perplexity and greedy last-word
   accuracy with its Wilson interval), GPT2E with all-null entities as the paper does.
5. Time per step (:func:`step_time_run`): both models, the same batches, steps alternating so that machine
   load hits both alike; median seconds of forward + backward + clipping + AdamW (:func:`timed_step`,
   also used by ``benchmarks/bench_entity_gpt2.py``).
6. Table 4 and t-SNE (:mod:`lmstudy.entity.probes`): mention vectors on GUM test (the corpus with POS tags).
7. NER probe (:func:`ner_run`, cached): a BiLSTM over frozen word vectors of each fine-tuned model (GPT2E
   with entity information), trained with the same settings for both, on ``ner_corpus``'s outermost typed
   entity layer (LitBank: ACE types PER/LOC/GPE/FAC/ORG/VEH on proper and common noun phrases, the closest
   we have to OntoNotes NER; or GUM's 10 types), scored span-level on its test split.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd
import torch
from transformers import GPT2LMHeadModel

from lmstudy.claims import (
    DOES_NOT_HOLD, HOLDS, WITHIN_NOISE, ClaimRow, Spread, claims_table, effect, spread_table, spreads, verdict_of,
)
from lmstudy.data.readers.coref import CorefDocument
from lmstudy.entity.data import EntityDocument, EntityLMTask, encode_coref_document, entity_stream_loss
from lmstudy.entity.probes import (
    BiLSTMTagger, NerProbeTask, mention_vectors, predict_tags, similarity_rows, span_scores, standardise,
    tag_vocabulary, tagged_sentences,
)
from lmstudy.evaluation import lambada_examples, lambada_scores
from lmstudy.entity.model import GPT2E
from lmstudy.runs import Run, cached, canonical_json, get_run, read_log
from lmstudy.training import TrainConfig, count_parameters, load_weights, train_and_restore
from lmstudy.wiki_base import wiki_base_config

STUDY = "02_entity_transformer"
MODELS = ("GPT2", "GPT2E")
SPLITS = {"train": "train", "valid": "dev", "test": "test"}  # our names -> the readers' split names
COLOURS = {"GPT2": "tab:orange", "GPT2E": "tab:blue"}  # the paper's Figures 2-3


@dataclass(frozen=True)
class EntityStudyConfig:
    """The entity study's settings: base model, fine-tuning data and recipe, evaluation slices, NER probe."""

    # base model: the Wikipedia base (lmstudy.wiki_base) of ``base_scale`` unless ``init_from`` names GPT-2 weights
    base_scale: str = "smoke"
    init_from: str = ""
    # fine-tuning data: coreference corpora, documents per corpus (0 = all)
    corpora: list = field(default_factory=lambda: ["gum", "litbank"])
    train_docs: int = 0
    eval_docs: int = 0
    # fine-tuning (identical for GPT2 and GPT2E)
    seq_len: int = 64
    batch_size: int = 4
    finetune_steps: int = 100
    lr: float = 1e-4
    warmup_steps: int = 10
    eval_every: int = 50
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    mixed_precision: str = "no"
    # evaluation
    lambada_examples: int = 0  # 0 = all 5,153
    timing_steps: int = 20
    similarity_docs: int = 0  # GUM test documents for Table 4 and t-SNE (0 = all 30)
    tsne_entities: int = 10
    # NER probe
    ner_corpus: str = "litbank"
    ner_train_docs: int = 0  # documents of the NER corpus' train split (0 = all)
    ner_eval_docs: int = 0  # of its dev and test splits (0 = all)
    ner_hidden: int = 128
    ner_epochs: int = 5
    ner_lr: float = 1e-3
    ner_batch_size: int = 32

    def base_identity(self) -> dict:
        """What identifies the starting weights (and tokenizer) in every run config."""
        if self.init_from:
            return {"init_from": self.init_from}
        return {"krony_base": wiki_base_config(self.base_scale).base_config()}  # key kept: run hashes

    def finetune_identity(self) -> dict:
        keys = ("corpora", "train_docs", "eval_docs", "seq_len", "batch_size", "finetune_steps", "lr",
                "warmup_steps", "eval_every", "mixed_precision")
        return {"base": self.base_identity(), **{key: getattr(self, key) for key in keys}}


# ---------------------------------------------------------------------------------------------------
# Base model and data
# ---------------------------------------------------------------------------------------------------


_BASES: dict[str, tuple[GPT2LMHeadModel, object]] = {}


def load_base(config: EntityStudyConfig) -> tuple[GPT2LMHeadModel, object]:
    """The base GPT-2 (trained, best weights) and its tokenizer; pretrains the Wikipedia base if needed.

    Loaded once per process (``initial_model`` copies the weights, the base itself is never changed).
    """
    key = canonical_json(config.base_identity())
    if key not in _BASES:
        _BASES[key] = _load_base(config)
    return _BASES[key]


def _load_base(config: EntityStudyConfig) -> tuple[GPT2LMHeadModel, object]:
    if config.init_from:
        from transformers import AutoTokenizer

        model = GPT2LMHeadModel.from_pretrained(config.init_from)
        try:
            tokenizer = AutoTokenizer.from_pretrained(config.init_from)
        except OSError:  # weights without tokenizer files: GPT-2's BPE from the data dir
            from lmstudy.tokenization import gpt2_tokenizer

            tokenizer = gpt2_tokenizer()
        return model, tokenizer
    from lmstudy.tokenization import load_tokenizer
    from lmstudy.wiki_base import base_run, gpt2_config, pretrain_base

    base = wiki_base_config(config.base_scale)
    pretrain_base(base)
    run = base_run(base)
    tokenizer = load_tokenizer(run.path / "tokenizer")
    model = GPT2LMHeadModel(gpt2_config(base, len(tokenizer)))
    load_weights(model, run, "best")
    return model, tokenizer


@lru_cache(maxsize=None)
def coref_documents(corpus: str) -> tuple[CorefDocument, ...]:
    """Every document of a coreference corpus, read once per process (each reader streams its archive)."""
    from lmstudy.data.catalogue import corpus_path

    if corpus == "gum":
        from lmstudy.data.readers.gum import read_gum_coref

        return tuple(read_gum_coref(corpus_path("gum")))
    if corpus == "litbank":
        from lmstudy.data.readers.litbank import read_litbank_coref

        return tuple(read_litbank_coref(corpus_path("litbank")))
    raise ValueError(f"coreference corpus {corpus!r} is not one of gum, litbank")


def coref_split(corpus: str, split: str, limit: int = 0) -> list[CorefDocument]:
    """The first ``limit`` (0: all) documents of one split (train / valid / test) of a corpus."""
    docs = [doc for doc in coref_documents(corpus) if doc.split == SPLITS[split]]
    return docs[:limit] if limit else docs


_ENCODED: dict[tuple, list[EntityDocument]] = {}


def encoded_split(corpus: str, split: str, limit: int, tokenizer) -> list[EntityDocument]:
    """``coref_split`` encoded with ``tokenizer`` (memoised per process: several stages read the same ids)."""
    key = (corpus, split, limit, tokenizer.name_or_path, len(tokenizer), id(tokenizer))
    if key not in _ENCODED:
        _ENCODED[key] = [encode_coref_document(doc, tokenizer) for doc in coref_split(corpus, split, limit)]
    return _ENCODED[key]


def study_documents(config: EntityStudyConfig, tokenizer) -> dict[str, list[EntityDocument]]:
    """Fine-tuning documents per split: every corpus of ``config.corpora``, concatenated."""
    limits = {"train": config.train_docs, "valid": config.eval_docs, "test": config.eval_docs}
    return {split: [doc for corpus in config.corpora for doc in encoded_split(corpus, split, limit, tokenizer)]
            for split, limit in limits.items()}


def without_entities(docs: list[EntityDocument]) -> list[EntityDocument]:
    """The same documents with every entity id null (entity information removed at inference)."""
    return [dataclasses.replace(doc, entity_ids=[0] * len(doc.entity_ids)) for doc in docs]


# ---------------------------------------------------------------------------------------------------
# Fine-tuning GPT2 and GPT2E
# ---------------------------------------------------------------------------------------------------


def initial_model(base: GPT2LMHeadModel, name: str, seed: int) -> GPT2E:
    """GPT2E (entity attention in every block) or GPT2 (none) with the base's weights; the seed draws the
    new entity weights (their output projection is zero, so both compute the base exactly)."""
    if name not in MODELS:
        raise ValueError(f"model {name!r} is not one of {MODELS}")
    torch.manual_seed(seed)
    return GPT2E.from_gpt2(base, entity_layers=None if name == "GPT2E" else [])


def _finetune_config(config: EntityStudyConfig, name: str, seed: int) -> dict:
    return {"stage": "finetune", "model": name, "seed": seed, **config.finetune_identity(),
            "lambada_examples": config.lambada_examples}


def _check_positions(config: EntityStudyConfig, base: GPT2LMHeadModel) -> None:
    if config.seq_len > base.config.n_positions:
        raise ValueError(f"seq_len={config.seq_len} exceeds the base model's {base.config.n_positions} positions")


def finetune_run(config: EntityStudyConfig, name: str, seed: int) -> dict:
    """Fine-tune ``name`` (GPT2 / GPT2E) from the base with ``seed`` (cached), then evaluate its best weights."""
    def fn(run: Run) -> dict:
        base, tokenizer = load_base(config)
        _check_positions(config, base)
        docs = study_documents(config, tokenizer)
        model = initial_model(base, name, seed)
        task = EntityLMTask(docs["train"], docs["valid"], batch_size=config.batch_size, seq_len=config.seq_len,
                            pad_id=tokenizer.eos_token_id, seed=seed)
        steps = config.finetune_steps
        train_config = TrainConfig(
            max_steps=steps, lr=config.lr, lr_schedule="cosine", warmup_steps=config.warmup_steps,
            eval_every=min(config.eval_every, steps), checkpoint_every=min(config.eval_every, steps), seed=seed,
            log_every=max(1, min(config.eval_every, steps) // 10), mixed_precision=config.mixed_precision,
        )
        start = time.perf_counter()
        metrics = train_and_restore(model, task, train_config, run)
        seconds = time.perf_counter() - start  # this session's share when resumed
        evaluate = dict(seq_len=config.seq_len, batch_size=config.batch_size, pad_id=tokenizer.eos_token_id)
        test_loss = entity_stream_loss(model, docs["test"], **evaluate)
        results = {**metrics, "test_loss": test_loss, "test_ppl": math.exp(test_loss),
                   **lambada_scores(model, lambada_examples(tokenizer, config.lambada_examples),
                                    base.config.n_positions, config.batch_size),
                   "train_seconds": seconds, "parameters": count_parameters(model),
                   "train_docs": len(docs["train"]), "train_tokens": sum(len(d.input_ids) for d in docs["train"])}
        if model.has_entity_layers:
            no_entities = entity_stream_loss(model, without_entities(docs["test"]), **evaluate)
            results.update(test_loss_no_entities=no_entities, test_ppl_no_entities=math.exp(no_entities))
        return results

    return cached(STUDY, _finetune_config(config, name, seed), fn)


def finetuned_model(config: EntityStudyConfig, name: str, seed: int) -> tuple[GPT2E, object]:
    """The fine-tuned model (best weights; trains it if needed) and the tokenizer."""
    finetune_run(config, name, seed)
    base, tokenizer = load_base(config)
    model = initial_model(base, name, seed)
    load_weights(model, get_run(STUDY, _finetune_config(config, name, seed)), "best")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the probes' forward passes (paper scale: a GPU)
    return model.to(device).eval(), tokenizer


# ---------------------------------------------------------------------------------------------------
# Tables 2-3 and Figures 2-3
# ---------------------------------------------------------------------------------------------------


def perplexity_runs(config: EntityStudyConfig) -> pd.DataFrame:
    """One row per (model, seed): losses and perplexities of Tables 2-3 (training happens here, cached)."""
    rows = []
    for seed in config.seeds:
        for name in MODELS:
            metrics = finetune_run(config, name, seed)
            log = read_log(get_run(STUDY, _finetune_config(config, name, seed)))
            train_loss = log[log["kind"] == "train"]["loss"].tail(5).mean()  # the last few logged steps
            rows.append({"model": name, "seed": seed, "train_loss": train_loss, "train_ppl": math.exp(train_loss),
                         "val_loss": metrics["best_val_loss"], "val_ppl": math.exp(metrics["best_val_loss"]),
                         **{key: metrics.get(key, float("nan")) for key in (
                             "test_ppl", "test_ppl_no_entities", "lambada_ppl", "lambada_acc", "train_seconds")}})
    return pd.DataFrame(rows)


def loss_curves(config: EntityStudyConfig) -> pd.DataFrame:
    """Training and validation loss per step of every fine-tuning run (model, seed, split, step, loss)."""
    frames = []
    for seed in config.seeds:
        for name in MODELS:
            finetune_run(config, name, seed)
            log = read_log(get_run(STUDY, _finetune_config(config, name, seed)))
            train_part = log[log["kind"] == "train"][["step", "loss"]].assign(split="training")
            valid_part = log[log["kind"] == "eval"][["step", "val_loss"]].rename(columns={"val_loss": "loss"})
            frames.append(pd.concat([train_part, valid_part.assign(split="validation")]).assign(model=name, seed=seed))
    return pd.concat(frames, ignore_index=True)


def plot_loss_curves(curves: pd.DataFrame, title: str = ""):
    """The paper's Figures 2-3 side by side: mean over seeds with the min-max band, GPT2 orange, GPT2E blue."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for axis, split in zip(axes, ("training", "validation")):
        sns.lineplot(data=curves[curves["split"] == split], x="step", y="loss", hue="model", palette=COLOURS,
                     errorbar=("pi", 100), marker="o" if split == "validation" else None, ax=axis)
        axis.set(xlabel="training step", ylabel="loss (nats / token)", title=f"{split} loss")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------------------------
# Time per step
# ---------------------------------------------------------------------------------------------------


def timed_step(model, task, batch, carry, optimizer, device) -> tuple[float, object]:
    """Seconds of one training step (task loss with the carry, backward, clip to 1.0, AdamW) and the new carry."""
    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    synchronize()
    start = time.perf_counter()
    loss, _, carry = task.loss(model, batch, carry)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    synchronize()
    return time.perf_counter() - start, carry


def compare_step_times(models: dict[str, torch.nn.Module], task: EntityLMTask, steps: int, warmup: int = 2,
                       device=None) -> dict[str, list[float]]:
    """Seconds per step of each model on the same batches, models alternating (and which goes first too)."""
    device = torch.device(device or "cpu")
    batches = task.batches(0)
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-5) for name, m in models.items()}
    carries = {name: None for name in models}
    times = {name: [] for name in models}
    names = list(models)
    for step in range(warmup + steps):
        if step % len(batches) == 0:
            carries = {name: None for name in models}  # a new pass over the documents
        batch = batches[step % len(batches)]
        for name in names if step % 2 == 0 else names[::-1]:
            models[name].train()
            seconds, carries[name] = timed_step(models[name], task, batch, carries[name], optimizers[name], device)
            if step >= warmup:
                times[name].append(seconds)
    return times


def step_time_run(config: EntityStudyConfig) -> dict:
    """Median seconds per training step of GPT2 and GPT2E at the study's sizes (cached: measured once)."""
    run_config = {"stage": "step_time", **config.finetune_identity(), "timing_steps": config.timing_steps}

    def fn(run: Run) -> dict:
        base, tokenizer = load_base(config)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        docs = study_documents(config, tokenizer)
        task = EntityLMTask(docs["train"], docs["valid"], batch_size=config.batch_size, seq_len=config.seq_len,
                            pad_id=tokenizer.eos_token_id)
        models = {name: initial_model(base, name, 0).to(device) for name in MODELS}
        times = compare_step_times(models, task, config.timing_steps, device=device)
        gpt2, gpt2e = (statistics.median(times[name]) for name in MODELS)
        ratio = statistics.median(e / g for e, g in zip(times["GPT2E"], times["GPT2"]))
        return {"gpt2_seconds": gpt2, "gpt2e_seconds": gpt2e, "overhead_pct": 100 * (ratio - 1),
                "steps": config.timing_steps, "threads": torch.get_num_threads(), "device": str(device)}

    return cached(STUDY, run_config, fn)


def step_time_table(config: EntityStudyConfig) -> pd.DataFrame:
    """Seconds per training step of GPT2 and GPT2E: ours (:func:`step_time_run`) beside the paper's."""
    timing = step_time_run(config)
    return pd.DataFrame([
        {"source": "ours", "GPT2 s/step": timing["gpt2_seconds"], "GPT2E s/step": timing["gpt2e_seconds"],
         "overhead %": timing["overhead_pct"], "where": f"{timing['device']}, {timing['threads']} thread(s)"},
        {"source": "paper", "GPT2 s/step": 0.290, "GPT2E s/step": 0.298, "overhead %": 100 * (0.298 / 0.290 - 1),
         "where": "Titan V, GPT-2 small, batch 1"},
    ])


# ---------------------------------------------------------------------------------------------------
# Table 4 and t-SNE
# ---------------------------------------------------------------------------------------------------

SETTINGS = {"GPT2E without entities": ("GPT2E", False), "GPT2E with entities": ("GPT2E", True),
            "GPT2": ("GPT2", False)}  # the paper's Table 4 columns: (model, entity information at inference)


def similarity_docs(config: EntityStudyConfig, tokenizer) -> tuple[list[CorefDocument], list[EntityDocument]]:
    """The GUM test documents of Table 4 and t-SNE (``config.similarity_docs``; 0: all), raw and encoded."""
    return (coref_split("gum", "test", config.similarity_docs),
            encoded_split("gum", "test", config.similarity_docs, tokenizer))


def similarity_run(config: EntityStudyConfig, seed: int) -> dict:
    """Table 4 of the models of one seed (cached): {"rows": tidy rows (setting, measure, group, value)}."""
    run_config = {"stage": "similarity", **config.finetune_identity(), "seed": seed,
                  "similarity_docs": config.similarity_docs}

    def fn(run: Run) -> dict:
        rows = []
        for setting, (name, use_entities) in SETTINGS.items():
            model, tokenizer = finetuned_model(config, name, seed)
            coref, encoded = similarity_docs(config, tokenizer)
            rows += similarity_rows(*mention_vectors(model, coref, encoded, config.seq_len, use_entities), setting)
        return {"rows": rows}

    return cached(STUDY, run_config, fn)


def similarity_table(config: EntityStudyConfig) -> pd.DataFrame:
    """Table 4 over seeds: rows measure x POS group, columns (mean / std / n, setting)."""
    rows = [dict(row, seed=seed) for seed in config.seeds for row in similarity_run(config, seed)["rows"]]
    stats = spread_table(pd.DataFrame(rows), ["measure", "group", "setting"], ["value"])["value"]
    return stats.unstack("setting").reindex(columns=list(SETTINGS), level=1)


def tsne_frames(config: EntityStudyConfig, seed: int | None = None) -> dict[str, pd.DataFrame]:
    """t-SNE points of the ``tsne_entities`` most mentioned entities, GPT2 and GPT2E (with entities).

    Cached, so that the figure can be redrawn from an archive that keeps no fine-tuned weights."""
    from lmstudy.entity.probes import tsne_frame

    seed = config.seeds[0] if seed is None else seed
    run_config = {"stage": "tsne", **config.finetune_identity(), "seed": seed,
                  "similarity_docs": config.similarity_docs, "tsne_entities": config.tsne_entities}

    def fn(run: Run) -> dict:
        frames = {}
        for title, name, use_entities in (("GPT2", "GPT2", False), ("GPT2E (with entities)", "GPT2E", True)):
            model, tokenizer = finetuned_model(config, name, seed)
            coref, encoded = similarity_docs(config, tokenizer)
            meta, vectors, _ = mention_vectors(model, coref, encoded, config.seq_len, use_entities)
            frames[title] = tsne_frame(meta, vectors, config.tsne_entities, seed=seed).to_dict("records")
        return {"frames": frames}

    return {title: pd.DataFrame(rows) for title, rows in cached(STUDY, run_config, fn)["frames"].items()}


# ---------------------------------------------------------------------------------------------------
# NER probe (Table 5)
# ---------------------------------------------------------------------------------------------------


def ner_run(config: EntityStudyConfig, name: str, seed: int) -> dict:
    """Train the BiLSTM probe on frozen vectors of the fine-tuned ``name`` of ``seed``; test span scores."""
    keys = ("ner_corpus", "ner_train_docs", "ner_eval_docs", "ner_hidden", "ner_epochs", "ner_lr", "ner_batch_size")
    run_config = {"stage": "ner", "model": name, "seed": seed, **config.finetune_identity(),
                  **{key: getattr(config, key) for key in keys}}

    def fn(run: Run) -> dict:
        model, tokenizer = finetuned_model(config, name, seed)
        use_entities = model.has_entity_layers
        sentences = {}
        for split in ("train", "valid", "test"):
            limit = config.ner_train_docs if split == "train" else config.ner_eval_docs
            sentences[split] = tagged_sentences(model, coref_split(config.ner_corpus, split, limit),
                                                encoded_split(config.ner_corpus, split, limit, tokenizer),
                                                config.seq_len, use_entities)
        sentences = dict(zip(sentences, standardise(*sentences.values())))  # train, valid, test
        tags = tag_vocabulary(sentences["train"])
        task = NerProbeTask(sentences["train"], sentences["valid"], tags, batch_size=config.ner_batch_size, seed=seed)
        torch.manual_seed(seed)
        tagger = BiLSTMTagger(model.config.n_embd, config.ner_hidden, len(tags))
        epoch = task.steps_per_epoch()
        train_and_restore(tagger, task, TrainConfig(
            max_epochs=config.ner_epochs, max_steps=config.ner_epochs * epoch, lr=config.ner_lr, optimizer="adamw",
            eval_every=epoch, checkpoint_every=epoch, early_stopping_patience=2, seed=seed,
            log_every=max(1, epoch // 4)), run)
        scores = span_scores([s.tags for s in sentences["test"]], predict_tags(tagger, sentences["test"], tags))
        return {"scores": scores.to_dict("records"), "tags": tags}

    return cached(STUDY, run_config, fn)


def ner_table(config: EntityStudyConfig) -> pd.DataFrame:
    """Per (model, seed, type): precision, recall, F1 and support of the NER probe on the test split."""
    rows = [dict(row, model=name, seed=seed) for seed in config.seeds for name in MODELS
            for row in ner_run(config, name, seed)["scores"]]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------------------------


def claims(runs: pd.DataFrame, timing: dict, similarity: pd.DataFrame, ner: pd.DataFrame) -> pd.DataFrame:
    """Each of the paper's claims (claim, verdict, evidence), our numbers (mean ± std over seeds) as evidence.

    ``runs``: :func:`perplexity_runs`; ``timing``: :func:`step_time_run`; ``similarity``:
    :func:`similarity_table`; ``ner``: :func:`ner_table`. A "GPT2E is better" claim is ``within noise`` when
    the difference is within the larger seed std (:func:`lmstudy.claims.verdict_of`); "similar in-domain
    perplexity" holds when the difference is within noise or below 2%; the time overhead is small under 10%.
    """
    rows: list[ClaimRow] = []

    def evidence(gpt2: Spread, gpt2e: Spread, digits: int) -> str:
        return f"GPT2 {gpt2.format(digits)}, GPT2E {gpt2e.format(digits)}"

    def better(claim: str, gpt2: Spread, gpt2e: Spread, direction: str, digits: int) -> None:
        rows.append(ClaimRow(claim, verdict_of(effect(gpt2e, gpt2, direction)), evidence(gpt2, gpt2e, digits)))

    test, lambada = spreads(runs, "model", "test_ppl"), spreads(runs, "model", "lambada_ppl")
    similar = (verdict_of(effect(test["GPT2E"], test["GPT2"], "lower")) == WITHIN_NOISE
               or abs(test["GPT2E"].mean / test["GPT2"].mean - 1) < 0.02)
    rows.append(ClaimRow("similar perplexity in-domain (coref test)", HOLDS if similar else DOES_NOT_HOLD,
                         evidence(test["GPT2"], test["GPT2E"], 2)))
    better("better LAMBADA perplexity", lambada["GPT2"], lambada["GPT2E"], "lower", 2)
    overhead = timing["overhead_pct"]
    rows.append(ClaimRow("small time overhead (paper +2.7%)", HOLDS if overhead < 10 else DOES_NOT_HOLD,
                         f"GPT2 {timing['gpt2_seconds']:.4f} s, GPT2E {timing['gpt2e_seconds']:.4f} s "
                         f"({overhead:+.1f}%)"))
    for group in ("NN*", "PRP*"):
        key = ("mention similarity", group)
        gpt2, gpt2e = (Spread(float(similarity["mean"].loc[key, setting]), float(similarity["std"].loc[key, setting]),
                              int(similarity["n"].loc[key, setting])) for setting in ("GPT2", "GPT2E with entities"))
        better(f"higher mention similarity ({group})", gpt2, gpt2e, "higher", 3)
    f1 = spreads(ner[ner["type"] == "overall"], "model", "f1")
    better("better NER F1 (paper +3 points)", f1["GPT2"], f1["GPT2E"], "higher", 3)
    return claims_table(rows)
