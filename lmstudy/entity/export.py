"""The entity study's model as a Hugging Face folder (:func:`export_model`, cached: ``<run>/model``, written by
lmstudy's one exporter, :func:`lmstudy.hf_export.export_folder`): ``GPT2E.from_pretrained`` with its ``GPT2EConfig``
reads it back (:func:`check_export`)."""

from __future__ import annotations

from pathlib import Path

from lmstudy.entity.config import STUDY, EntityStudyConfig, load_base
from lmstudy.entity.documents import study_documents
from lmstudy.entity.runs import coref_test_scores, entity_class, finetune_config, finetune_run, finetuned_model
from lmstudy.hf_export import export_folder
from lmstudy.runs import Run, cached, get_run
from lmstudy.training import count_parameters


EXPORT_FOLDER = "model"


def export_model(config: EntityStudyConfig, name: str = "GPT2E", seed: int | None = None) -> Path:
    """The best weights of ``name`` (seed: the first of ``seeds``) as a Hugging Face folder (cached run,
    ``<run>/model``): ``save_pretrained`` (safetensors, float32, ``config.json`` of :class:`GPT2EConfig` with
    the entity options), the tokenizer, and ``lmstudy_run.json`` (the fine-tuning config and metrics; no model
    card).
    ``GPT2E.from_pretrained(path)`` reads it back."""
    seed = config.seeds[0] if seed is None else seed
    run_config = {"stage": "export", "model": name, "seed": seed, **config.finetune_identity()}

    def fn(run: Run) -> dict:
        model, tokenizer = finetuned_model(config, name, seed)
        record = {"study": STUDY, "model": name, "seed": seed, "config": finetune_config(config, name, seed),
                  "metrics": finetune_run(config, name, seed)}
        export_folder(model.cpu(), tokenizer, run.path / EXPORT_FOLDER, record)
        return {"folder": EXPORT_FOLDER, "parameters": count_parameters(model)}

    cached(STUDY, run_config, fn)
    return get_run(STUDY, run_config).path / EXPORT_FOLDER


def check_export(config: EntityStudyConfig, name: str = "GPT2E", seed: int | None = None) -> dict:
    """Reload :func:`export_model`'s folder with ``GPT2E.from_pretrained`` (``LlamaE``'s for a Llama base) and
    score the test set with it: the test perplexity must be the one the fine-tuning run recorded for its best
    weights. Needs only the folder (an archive with ``--weights stage=export`` redraws this without the training
    weights)."""
    seed = config.seeds[0] if seed is None else seed
    path = export_model(config, name, seed)
    base = load_base(config)
    reloaded = entity_class(base.model).from_pretrained(str(path)).eval()
    tokenizer = base.tokenizer
    scores = coref_test_scores(reloaded, study_documents(config, tokenizer)["test"], config, tokenizer.eos_token_id)
    return {"path": str(path), "config_class": type(reloaded.config).__name__,
            "entity_init": reloaded.config.entity_init, "memory_update": reloaded.config.memory_update,
            "test_ppl_reloaded": scores["test_ppl"], "test_ppl_recorded": finetune_run(config, name, seed)["test_ppl"]}
