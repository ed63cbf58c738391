"""The NER probe of the entity study (the paper's Table 5): a BiLSTM over frozen word vectors of each fine-tuned
model (GPT2E with entity information), trained with the same settings for both, on ``ner_corpus``'s outermost typed
entity layer (LitBank: ACE types PER/LOC/GPE/FAC/ORG/VEH on proper and common noun phrases, the closest we have to
OntoNotes NER; or GUM's 10 types), scored span-level on its test split (:func:`ner_run`, cached)."""

from __future__ import annotations

import pandas as pd
import torch

from lmstudy.entity.config import MODELS, STUDY, EntityStudyConfig
from lmstudy.entity.documents import ner_split
from lmstudy.entity.probes import (
    BiLSTMTagger, NerProbeTask, predict_tags, span_scores, standardise, tag_vocabulary, tagged_sentences,
)
from lmstudy.entity.runs import finetuned_model
from lmstudy.runs import Run, cached
from lmstudy.training import TrainConfig, train_and_restore


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
            sentences[split] = tagged_sentences(model, *ner_split(config, split, tokenizer), config.seq_len,
                                                use_entities)
        sentences = dict(zip(sentences, standardise(*sentences.values())))  # train, valid, test
        tags = tag_vocabulary(sentences["train"])
        task = NerProbeTask(sentences["train"], sentences["valid"], tags, batch_size=config.ner_batch_size, seed=seed)
        torch.manual_seed(seed)
        tagger = BiLSTMTagger(model.config.hidden_size, config.ner_hidden, len(tags))
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
