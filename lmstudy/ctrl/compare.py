"""Two kinds of control-code model side by side (issue 48): today's demo (``models/ctrl-demo``, a 3M GPT-2 fine-tuned
from our base) and the SmolLM2 control-code model (``models/ctrl-smollm2`` and its other seeds: SmolLM2-135M + a
LoRA + the code rows, :mod:`lmstudy.ctrl.smol_ctrl`), every measure of study 04 in units that compare across
tokenizers.

    python -m lmstudy ctrl compare    # every model, every part; resumable; 20 min for the two models, ~10 min a further seed

**Bits per byte.** The two models cut text into different tokens (an 8k BPE vs SmolLM2's 49k), so per-token
perplexities do not compare; every likelihood here is ``-log2 p(text | prefix) / bytes(text)`` over the *same
text*: the first :attr:`CompareConfig.max_chars` characters of each held-out document (the first
:attr:`CompareConfig.eval_docs` of each code's held-out part, the demo's own held-out documents).

The parts, one CSV each per model (``results/ctrl_smollm2/<model>/<part>.csv``, written as soon as computed, so
an interrupted run resumes with the parts it lacks; :func:`combined` stacks them with a ``model`` column):

- ``bits``: every document under every code and under no code (eos in the code's place, as study 04 reads "no
  code"): ``domain, document, condition, nats, bytes`` (:func:`code_bits`). From it, without the model:
  :func:`domain_bits` (right / mean wrong / best wrong / no code per domain) and :func:`attribution_rows` (Bayes'
  rule with a uniform prior over the codes: the code of the highest likelihood; top-1, top-3 and the confusion
  matrix through ``lmstudy.ctrl.study``).
- ``controllability``: ``study.controllability`` (4 neutral prompts x the sampling seeds, nucleus p = 0.9, the
  TF-IDF classifier fitted on the same real held-out text for both models).
- ``quality``: the repetition sweep (greedy, the paper's penalty θ = 1.0-1.5, HF's penalty, nucleus) with each
  continuation's bits per byte judged by SmolLM2 without codes or adapter (``lmstudy.ctrl.quality.judged_sweep``).
  For the SmolLM2 model the judge shares its base weights: a judge it was fine-tuned from, not an independent one
  (the docs say so next to the numbers).
- ``examples``: a handful of generations to read, chosen by a rule fixed before looking: every example of the app
  (``lmstudy.ctrl.serving.EXAMPLES``: its prompt and codes) with the examples' decoding (greedy, the paper's
  penalty θ = 1.2), 40 new tokens.
- ``mixing`` (Table 5) and ``links`` (Table 3): ``lmstudy.ctrl.probes`` with :attr:`CompareConfig.probe_seeds`
  sampling seeds, so every cell has at least 8 generations; the link probe samples (nucleus p = 0.9 with the
  paper's penalty θ = 1.2) for the same reason.

Claims that rest on training (steering, attribution, controllability) are measured on every training seed of the
SmolLM2 model (``seed-N`` labels); the generation probes (quality, mixing, links) on the app's model (seed 0) with
sampling seeds. Weights: :func:`lmstudy.weights_precision.with_weights` ``auto`` (SmolLM2 in bfloat16 on this CPU,
-0.01% WikiText-2 bits per byte against float32, 2.4x faster; the demo in float32).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from tqdm.auto import tqdm

from lmstudy.ctrl import probes, study
from lmstudy.ctrl.attribution import prefixed_log_likelihoods
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.generation import context_length
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.paths import REPO_ROOT

RESULTS = REPO_ROOT / "results" / "ctrl_smollm2"
DEMO = "ctrl-demo"
SMOL = "ctrl-smollm2"
NO_CODE = "(none)"
PARTS = ("bits", "controllability", "quality", "mixing", "links", "examples")
SEED_PARTS = ("bits", "controllability")  # what every training seed is measured on (claims that rest on training)
KEYS = ("model", "train_seed")  # what tells the models apart in a combined table
LINK_SAMPLING = SamplingConfig(top_p=0.9, penalty="ctrl", theta=1.2)


@dataclass(frozen=True)
class CompareConfig:
    """What the comparison reads and generates (the same for every model)."""

    eval_docs: int = 20  # held-out documents a code (the demo's run held out 20)
    max_chars: int = 500  # characters of each document scored: the same text for every tokenizer
    generation_tokens: int = 40  # new tokens of every generation (study 04's)
    control_seeds: tuple[int, ...] = (0, 1)  # nucleus seeds of controllability: 4 prompts x 2 = 8 per code
    probe_seeds: tuple[int, ...] = tuple(range(8))  # code-mixing and link probes: 8 generations per cell
    judge: str = "smollm2"  # the quality judge (lmstudy.pretrained.load_pretrained)
    weights: str = "auto"  # lmstudy.weights_precision


# --------------------------------------------------------------------------------------------------
# likelihoods in bits per byte


def code_bits(model, tokenizer, texts: Mapping[str, Sequence[str]], max_chars: int = 500) -> pd.DataFrame:
    """Every document of every domain (``texts``: code -> documents) cut to ``max_chars`` characters, scored
    under every code of ``texts`` and under no code (eos): one row per (domain, document, condition) with
    ``nats`` (-log p) and the text's ``bytes``. A text longer than the model's context (the demo's 256 tokens:
    a few News documents with many digits) has its last tokens scored in a window that no longer holds the code
    (:func:`window_log_likelihood`): the same for every condition, so only the window's first part tells them
    apart."""
    codes = list(texts)
    prefixes = [code_id(tokenizer, name) for name in codes] + [tokenizer.eos_token_id]
    conditions = [*codes, NO_CODE]
    limit = context_length(model)
    rows = []
    documents = [(domain, index, text[:max_chars]) for domain in codes for index, text in enumerate(texts[domain])]
    for domain, index, text in tqdm(documents, desc="bits per byte", unit="doc"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        head = ids[: limit - 1] if limit is not None else ids  # what fits after the one-token prefix
        nats = prefixed_log_likelihoods(model, head, prefixes)
        if len(head) < len(ids):  # past the context: the code has left the window, the same for every condition
            tail = window_log_likelihood(model, ids, len(head), limit)
            nats = [value + tail for value in nats]
        size = len(text.encode("utf-8"))
        rows += [{"domain": domain, "document": index, "condition": condition, "nats": -value, "bytes": size}
                 for condition, value in zip(conditions, nats)]
    return pd.DataFrame(rows)


def window_log_likelihood(model, ids: Sequence[int], start: int, limit: int) -> float:
    """``log p(ids[start:])`` (nats), each token given the ``limit - 1`` tokens before it (one window: the text must
    end within ``2 * limit - 2`` tokens)."""
    if len(ids) - start > limit - 1 or start < 1:
        raise ValueError(f"a text of {len(ids)} tokens does not fit two windows of the model's {limit}-token context: "
                         "lower max_chars")
    window = list(ids[-limit:])  # the last `limit` tokens: ids[start:] after the tokens before them
    tail = len(ids) - start
    return -study.continuation_loss(model, window[:-tail], window[-tail:]) * tail


def _bpb(frame: pd.DataFrame) -> float:
    return float(frame["nats"].sum() / frame["bytes"].sum() / math.log(2))


def domain_bits(bits: pd.DataFrame) -> pd.DataFrame:
    """Per domain (and model, :data:`KEYS`, when the table has them): bits per byte of its documents with its own code
    (``right_code``), every other code (``wrong_code_mean``: bytes-weighted over all of them), the best other code
    and no code."""
    keys = [column for column in KEYS if column in bits]
    rows = []
    for key, group in bits.groupby(keys + ["domain"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        domain = key[-1]
        by_condition = {condition: _bpb(part) for condition, part in group.groupby("condition", sort=False)}
        wrong = {name: value for name, value in by_condition.items() if name not in (domain, NO_CODE)}
        best = min(wrong, key=wrong.get)
        rows.append({**dict(zip(keys, key[:-1])), "domain": domain, "documents": group["document"].nunique(),
                     "bytes": int(group.loc[group["condition"] == domain, "bytes"].sum()),
                     "right_code": by_condition[domain],
                     "wrong_code_mean": _bpb(group[~group["condition"].isin([domain, NO_CODE])]),
                     "best_wrong_code": best, "best_wrong_code_bpb": wrong[best], "no_code": by_condition[NO_CODE]})
    return pd.DataFrame(rows)


def attribution_rows(bits: pd.DataFrame) -> pd.DataFrame:
    """Source attribution of every document from its likelihoods under the codes (uniform prior: the code of the
    lowest ``nats`` wins): ``study.attribution_summary``'s and ``study.confusion_matrix``'s input rows
    (``true_code, document, predicted, true_rank, correct``; :data:`KEYS` kept when there)."""
    keys = [column for column in KEYS if column in bits]
    coded = bits[bits["condition"] != NO_CODE]
    rows = []
    for key, group in coded.groupby(keys + ["domain", "document"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        ranked = group.sort_values("nats", kind="stable")["condition"].tolist()
        domain = key[-2]
        rows.append({**dict(zip(keys, key[:-2])), "true_code": domain, "document": key[-1], "predicted": ranked[0],
                     "true_rank": ranked.index(domain) + 1, "correct": ranked[0] == domain})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------
# the models and their parts


def smol_seed_models(scale: str = "cpu") -> dict[str, Path]:
    """``{label: folder}`` of the SmolLM2 model's training seeds: ``ctrl-smollm2`` (the first seed, the app's model)
    and ``ctrl-smollm2/seed-N`` for the others (exported by ``ctrl train-smol``)."""
    from lmstudy.ctrl.model import smol_configs

    seeds = [config.seed for config in smol_configs(scale)]
    return {SMOL if k == 0 else f"{SMOL}/seed-{seed}": (REPO_ROOT / "models" / SMOL if k == 0
                                                         else RESULTS / "models" / f"seed-{seed}")
            for k, seed in enumerate(seeds)}


def default_models() -> dict[str, Path]:
    """``{label: folder}`` of every compared model, in the order measured: the app's SmolLM2 model, the demo, the
    SmolLM2 model's other seeds (what a run cut short most needs comes first)."""
    seeds = smol_seed_models()
    first = next(iter(seeds))
    return {first: seeds.pop(first), DEMO: REPO_ROOT / "models" / DEMO, **seeds}


def parts_of(label: str) -> tuple[str, ...]:
    """The parts measured on a model: all of them on the two compared models, the training-seed parts on the
    SmolLM2 model's other seeds."""
    return SEED_PARTS if "/seed-" in label else PARTS


def missing_parts(results: Path = RESULTS, seeds: bool = False) -> list[str]:
    """``label/part`` of the two compared models' parts (with ``seeds``: also the SmolLM2 model's other seeds')
    not yet measured under ``results``. The figures and claims need the first kind; they use whichever other seeds
    are there."""
    labels = [label for label in default_models() if seeds or "/seed-" not in label]
    return [f"{label}/{part}" for label in labels for part in parts_of(label)
            if not (results / label / f"{part}.csv").is_file()]


def measure_part(part: str, loaded, texts: Mapping[str, Sequence[str]], config: CompareConfig, shared: dict):
    """One part (module docstring) of one loaded model (``lmstudy.ctrl.model.ControlModel``); ``shared`` caches
    what every model uses (the domain and language classifiers, the judge)."""
    model, tokenizer = loaded.model, loaded.tokenizer
    if part == "bits":
        return code_bits(model, tokenizer, texts, config.max_chars)
    if "classifier" not in shared:
        shared["classifier"] = study.train_domain_classifier(texts, seed=0)
    if part == "controllability":
        generations, _ = study.controllability(model, tokenizer, shared["classifier"], loaded.codes,
                                               max_new_tokens=config.generation_tokens, seeds=config.control_seeds)
        return generations
    if part == "quality":
        from lmstudy.ctrl.quality import judged_sweep
        from lmstudy.pretrained import load_pretrained

        if "judge" not in shared:
            shared["judge"] = load_pretrained(config.judge)[:2]
        return judged_sweep(model, tokenizer, *shared["judge"], loaded.codes,
                            max_new_tokens=config.generation_tokens)
    if part == "mixing":
        if "languages" not in shared:
            shared["languages"] = probes.language_classifier()
        return probes.code_mixing_table(model, tokenizer, shared["classifier"], languages=shared["languages"],
                                        max_new_tokens=config.generation_tokens, seeds=config.probe_seeds)
    if part == "links":
        return probes.link_probe(model, tokenizer, sampling=LINK_SAMPLING, max_new_tokens=config.generation_tokens,
                                 seeds=config.probe_seeds)
    if part == "examples":
        from lmstudy.ctrl.generation import generate_codes
        from lmstudy.ctrl.serving import EXAMPLES

        decoding = SamplingConfig(greedy=True, penalty="ctrl", theta=1.2)
        return pd.DataFrame([{"example": k, "prompt": prompt, "code": g.code, "continuation": g.text}
                             for k, (prompt, codes) in enumerate(EXAMPLES)
                             for g in generate_codes(model, tokenizer, prompt, codes, decoding,
                                                     config.generation_tokens, seed=0)])
    raise ValueError(f"unknown part {part!r}; parts: {', '.join(PARTS)}")


def compare(models: Mapping[str, Path] | None = None, config: CompareConfig = CompareConfig(),
            parts: Sequence[str] = PARTS, out: Path = RESULTS, force: bool = False) -> list[Path]:
    """Measure each model's parts (:func:`parts_of`, restricted to ``parts``) that ``out/<label>/`` lacks (all of
    them with ``force``); returns the files written. ``models``: ``{label: folder}``, default the demo and every
    seed of the SmolLM2 model."""
    from lmstudy.ctrl.data import MixtureConfig, load_coded_texts
    from lmstudy.ctrl.model import load_control_model
    from lmstudy.weights_precision import with_weights

    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {sorted(unknown)}; parts: {', '.join(PARTS)}")
    models = dict(models) if models is not None else default_models()
    todo = {label: [part for part in parts_of(label) if part in parts
                    and (force or not (out / label / f"{part}.csv").is_file())] for label in models}
    todo = {label: wanted for label, wanted in todo.items() if wanted}
    for label in todo:
        if not (Path(models[label]) / "control_codes.json").is_file():
            raise FileNotFoundError(f"{label}: no control-code model at {models[label]} (the demo ships in git; the "
                                    "SmolLM2 model: python -m lmstudy ctrl train-smol)")
    if not todo:
        return []
    texts = load_coded_texts(MixtureConfig(eval_docs=config.eval_docs, train_docs=1)).valid
    shared, written = {}, []
    for label, wanted in todo.items():
        loaded = load_control_model(models[label], device="cpu")
        loaded.model = with_weights(loaded.model, config.weights)
        if set(loaded.codes) != set(texts):
            raise ValueError(f"{label} knows the codes {loaded.codes}, not the study's {list(texts)}")
        for part in wanted:
            print(f"{label}: {part}", flush=True)
            table = measure_part(part, loaded, texts, config, shared)
            path = out / label / f"{part}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            table.to_csv(path, index=False)
            written.append(path)
    return written


def combined(part: str, out: Path = RESULTS) -> pd.DataFrame:
    """Every model's ``part`` table stacked, with ``model`` (``ctrl-demo``, ``ctrl-smollm2``) and ``train_seed`` (0
    for the demo and the app's model) first."""
    frames = []
    for path in sorted(out.glob(f"**/{part}.csv")):
        label = path.parent.relative_to(out).as_posix()
        model, _, seed = label.partition("/seed-")
        frames.append(pd.read_csv(path).assign(model=model, train_seed=int(seed or 0)))
    if not frames:
        raise FileNotFoundError(f"no {part}.csv under {out}: run python -m lmstudy ctrl compare")
    table = pd.concat(frames, ignore_index=True)
    return table[[*KEYS, *[c for c in table.columns if c not in KEYS]]]


# --------------------------------------------------------------------------------------------------
# the published side-by-side table and figures


def _spread(values) -> str:
    """``mean`` for one value, ``mean ± sd (n)`` for several (the training seeds)."""
    values = [float(v) for v in values]
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f} ({len(values)} seeds)"


def summary_table(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per measure, one column per model (:data:`SMOL`, :data:`DEMO`): the side-by-side table of the docs.
    Measures that rest on training are given over the training seeds (mean ± sd), the others on the first seed."""
    from lmstudy.ctrl.claims import GREEDY, NUCLEUS, PENALISED

    domains, attribution = domain_bits(tables["bits"]), attribution_rows(tables["bits"])
    control, quality = tables["controllability"], tables["quality"]
    mixing, links = tables["mixing"], tables["links"]
    measures = {}
    for model in (SMOL, DEMO):
        column = {}
        mine = domains[domains["model"] == model]
        for name, key in (("bits/byte, right code", "right_code"), ("bits/byte, wrong codes", "wrong_code_mean"),
                          ("bits/byte, no code", "no_code")):
            column[name] = _spread(mine.groupby("train_seed")[key].mean())
        rows = attribution[attribution["model"] == model]
        column["attribution top-1"] = _spread(rows.groupby("train_seed")["correct"].mean())
        column["attribution top-3"] = _spread(rows.groupby("train_seed")["true_rank"].apply(lambda r: (r <= 3).mean()))
        column["controllability"] = _spread(control[control["model"] == model].groupby("train_seed")["correct"].mean())
        first = quality[(quality["model"] == model) & (quality["train_seed"] == 0)]
        by_setting = first.groupby("setting")
        for setting, label in ((GREEDY, "greedy"), (PENALISED, "θ = 1.2"), (NUCLEUS, "nucleus")):
            column[f"repeated 4-grams, {label}"] = f"{by_setting['repeated_4gram'].mean()[setting]:.3f}"
            column[f"judged bits/byte, {label}"] = f"{by_setting['judge_bpb'].mean()[setting]:.3f}"
        mixed = mixing[(mixing["model"] == model) & mixing["mixed"].astype(bool)]
        both = mixed["template_kept"].fillna(0) * mixed["domain_kept"].fillna(0)
        column["code-mixing: both kept"] = f"{both.mean():.3f} of {len(both)}"
        followed = links[links["model"] == model]["mentions"].dropna()
        column["links: value followed"] = f"{followed.mean():.3f} of {len(followed)}"
        measures[model] = column
    return pd.DataFrame(measures).rename_axis("measure").reset_index()


def domain_plot(domains: pd.DataFrame) -> plt.Figure:
    """Per domain, bits per byte under the right code (bars) and no code (points), both models side by side (the
    SmolLM2 model: mean over its seeds)."""
    mean = domains.groupby(["model", "domain"], sort=False)[["right_code", "no_code"]].mean().reset_index()
    sns.set_theme(style="whitegrid")
    figure, axis = plt.subplots(figsize=(11, 4.5))
    sns.barplot(mean, x="domain", y="right_code", hue="model", hue_order=[SMOL, DEMO], ax=axis)
    for k, model in enumerate((SMOL, DEMO)):
        rows = mean[mean["model"] == model].set_index("domain").reindex(mean["domain"].unique())
        axis.scatter([x + (k - 0.5) * 0.4 for x in range(len(rows))], rows["no_code"], marker="_", s=120,
                     color="black", zorder=3, label="no code" if k == 0 else None)
    axis.set(xlabel="", ylabel="bits per byte (held-out, lower is better)",
             title="Held-out text under its own code (bars) and no code (marks)")
    axis.tick_params(axis="x", rotation=60)
    axis.legend()
    figure.tight_layout()
    return figure


def write_figures(out: Path, results: Path = RESULTS) -> dict[str, Path]:
    """The published side-by-side outputs from the measured tables into ``out``: ``04_smol_ctrl_summary.csv``,
    ``04_smol_ctrl_domains.csv`` / ``.png``, ``04_smol_ctrl_confusion.png`` (the SmolLM2 model's first seed) and
    ``04_smol_ctrl_examples.csv`` (both models' generations of the app's examples, side by side)."""
    from lmstudy.ctrl.study import confusion_heatmap, confusion_matrix
    from lmstudy.plots import save_figure

    tables = {part: combined(part, results) for part in PARTS}
    out.mkdir(parents=True, exist_ok=True)
    paths = {"summary": out / "04_smol_ctrl_summary.csv", "domains": out / "04_smol_ctrl_domains.csv",
             "examples": out / "04_smol_ctrl_examples.csv"}
    summary_table(tables).to_csv(paths["summary"], index=False)
    domains = domain_bits(tables["bits"])
    domains.to_csv(paths["domains"], index=False)
    paths["domains_plot"] = save_figure(domain_plot(domains), out / "04_smol_ctrl_domains.png")
    rows = attribution_rows(tables["bits"]).query("model == @SMOL and train_seed == 0")
    paths["confusion"] = save_figure(confusion_heatmap(confusion_matrix(rows), title="source attribution, "
                                                       f"{SMOL} (bits of the first {CompareConfig.max_chars} "
                                                       "characters, uniform prior)"), out / "04_smol_ctrl_confusion.png")
    examples = tables["examples"].query("train_seed == 0")
    examples.pivot_table(index=["example", "prompt", "code"], columns="model", values="continuation",
                         aggfunc="first", sort=False)[[SMOL, DEMO]].reset_index().to_csv(paths["examples"], index=False)
    return paths


__all__ = ["CompareConfig", "DEMO", "NO_CODE", "PARTS", "RESULTS", "SMOL", "attribution_rows", "code_bits",
           "combined", "compare", "default_models", "domain_bits", "domain_plot", "measure_part", "missing_parts", "parts_of",
           "smol_seed_models", "summary_table", "write_figures"]
