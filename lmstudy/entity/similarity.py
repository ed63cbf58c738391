"""Table 4 (mention and entity similarity) and the t-SNE pictures of the entity study
(:mod:`lmstudy.entity.probes`): mention vectors on GUM test (the corpus with POS tags), per seed, from the
fine-tuned models' best weights."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from lmstudy.claims import spread_table
from lmstudy.data.readers.coref import CorefDocument
from lmstudy.entity.config import STUDY, EntityStudyConfig
from lmstudy.entity.data import EntityDocument
from lmstudy.entity.documents import coref_split, encoded_split
from lmstudy.entity.probes import mention_vectors, similarity_rows
from lmstudy.entity.runs import finetuned_model
from lmstudy.paths import REPO_ROOT, runs_dir
from lmstudy.runs import Run, cached


SETTINGS = {"GPT2E without entities": ("GPT2E", False), "GPT2E with entities": ("GPT2E", True),
            "GPT2": ("GPT2", False)}  # the paper's Table 4 columns: (model, entity information at inference)


def similarity_docs(config: EntityStudyConfig, tokenizer) -> tuple[list[CorefDocument], list[EntityDocument]]:
    """The GUM test documents of Table 4 and t-SNE (``config.similarity_docs``; 0: all), raw and encoded."""
    return (coref_split("gum", "test", config.similarity_docs),
            encoded_split("gum", "test", config.similarity_docs, tokenizer))


_MENTION_VECTORS: dict[tuple, tuple] = {}


def similarity_vectors(config: EntityStudyConfig, seed: int, settings: list[tuple[str, bool]]) -> dict[tuple, tuple]:
    """``mention_vectors`` over the similarity documents of the fine-tuned models of ``seed``, per (model, entity
    information at inference) of ``settings``. Memoised per process: Table 4 and t-SNE read the same mentions
    through the same models, and each fine-tuned model is loaded once for all its settings. The key holds the run
    cache's folder too: the same config in another run cache (a test's) may hold other weights."""
    identity = json.dumps({**config.finetune_identity(), "seed": seed, "docs": config.similarity_docs,
                           "runs": str(runs_dir())}, sort_keys=True, default=str)
    models = {}
    for name, use_entities in settings:
        key = (identity, name, use_entities)
        if key not in _MENTION_VECTORS:
            if name not in models:
                models[name] = finetuned_model(config, name, seed)
            model, tokenizer = models[name]
            coref, encoded = similarity_docs(config, tokenizer)
            _MENTION_VECTORS[key] = mention_vectors(model, coref, encoded, config.seq_len, use_entities)
    return {setting: _MENTION_VECTORS[(identity, *setting)] for setting in settings}


def similarity_run(config: EntityStudyConfig, seed: int) -> dict:
    """Table 4 of the models of one seed (cached): {"rows": tidy rows (setting, measure, group, value)}."""
    run_config = {"stage": "similarity", **config.finetune_identity(), "seed": seed,
                  "similarity_docs": config.similarity_docs}

    def fn(run: Run) -> dict:
        vectors = similarity_vectors(config, seed, list(SETTINGS.values()))
        return {"rows": [row for setting, key in SETTINGS.items() for row in similarity_rows(*vectors[key], setting)]}

    return cached(STUDY, run_config, fn)


def similarity_seeds(config: EntityStudyConfig) -> pd.DataFrame:
    """Table 4 per seed: one row per (seed, setting, measure, group) with its ``value`` (the claims pair the
    models by seed; :func:`similarity_table` summarises it)."""
    return pd.DataFrame([{"seed": seed, **row} for seed in config.seeds for row in similarity_run(config, seed)["rows"]])


def archived_similarity_seeds(archive: Path | None = None, init_from: str | None = None) -> pd.DataFrame:
    """:func:`similarity_seeds` read from the archived similarity runs (``results/runs/02_entity_shared``, stage
    ``similarity``: their ``metrics.json``), without the run cache or any model: how
    ``figures/02_entity_similarity_seeds.csv`` was derived for runs made before the notebook wrote it.
    ``init_from``: the runs on that fetched model (``"smollm2"``); None: those on our own base."""
    archive = Path(archive) if archive is not None else REPO_ROOT / "results" / "runs" / STUDY
    rows = []
    for config_file in sorted(archive.glob("*/config.json")):
        run_config = json.loads(config_file.read_text(encoding="utf-8"))
        if run_config.get("stage") == "similarity" and run_config["base"].get("init_from") == init_from:
            metrics = json.loads((config_file.parent / "metrics.json").read_text(encoding="utf-8"))
            rows += [{"seed": run_config["seed"], **row} for row in metrics["rows"]]
    return pd.DataFrame(rows).sort_values("seed", kind="stable").reset_index(drop=True)


def similarity_summary(seeds: pd.DataFrame) -> pd.DataFrame:
    """Table 4 over seeds from :func:`similarity_seeds`: rows measure x POS group, columns (mean / std / n,
    setting)."""
    stats = spread_table(seeds, ["measure", "group", "setting"], ["value"])["value"]
    return stats.unstack("setting").reindex(columns=list(SETTINGS), level=1)


def similarity_table(config: EntityStudyConfig) -> pd.DataFrame:
    """Table 4 over seeds: rows measure x POS group, columns (mean / std / n, setting)."""
    return similarity_summary(similarity_seeds(config))


def tsne_frames(config: EntityStudyConfig, seed: int | None = None) -> dict[str, pd.DataFrame]:
    """t-SNE points of the ``tsne_entities`` most mentioned entities, GPT2 and GPT2E (with entities).

    Cached, so that the figure can be redrawn from an archive that keeps no fine-tuned weights."""
    from lmstudy.entity.probes import tsne_frame

    seed = config.seeds[0] if seed is None else seed
    run_config = {"stage": "tsne", **config.finetune_identity(), "seed": seed,
                  "similarity_docs": config.similarity_docs, "tsne_entities": config.tsne_entities}

    def fn(run: Run) -> dict:
        panels = {"GPT2": ("GPT2", False), "GPT2E (with entities)": ("GPT2E", True)}
        vectors = similarity_vectors(config, seed, list(panels.values()))
        frames = {}
        for title, key in panels.items():
            meta, points, _ = vectors[key]
            frames[title] = tsne_frame(meta, points, config.tsne_entities, seed=seed).to_dict("records")
        return {"frames": frames}

    return {title: pd.DataFrame(rows) for title, rows in cached(STUDY, run_config, fn)["frames"].items()}
