"""GPT2E: GPT-2 with Entity-Transformer blocks (Stylianou & Vlahavas 2020, "E.T.").

There is no public code for the paper; this docstring is our reading of it (Sec. 3, Fig. 1).

Architecture
------------
An Entity-Transformer block is a Hugging Face ``GPT2Block`` (LN -> masked self-attention -> residual ->
LN -> MLP -> residual), untouched, followed by one more sub-layer, the *entity attention*:

    x = GPT2Block(h)                                           # (B, T, C)
    q, v = split(ln_e(x) W_qv)                                 # queries and values from the hidden states
    k = E W_k                                                  # keys from the per-token entity states E
    h' = x + c_proj(causal_multi_head_attention(q, k, v))      # residual, like every GPT-2 sub-layer

``E`` (B, T, C) holds, for every input position, the representation of the entity the input token is part
of, or ``E_null`` (a vector of ones in the paper) for tokens outside every mention. The same ``E`` feeds every block
(Eq. 1: ``h_l = entity_transformer_block(h_{l-1}, E)``). The paper draws the entity attention as "an
adaptation of the masked multi-head self attention"; the residual connection and the pre-LayerNorm
``ln_e`` are ours (GPT-2's sub-layer pattern): with them, a zero output projection makes the block exactly
a ``GPT2Block``, which is how :meth:`GPT2E.from_gpt2` starts from a trained GPT-2 (the paper's learning
rate of 2e-5 suggests it fine-tuned pretrained GPT-2). ``config.entity_layers`` lists the blocks that get
the entity sub-layer (``None``: all, as in the paper; ``[]``: plain GPT-2, our baseline "GPT2").
``GPT2EModel`` is HF's ``GPT2Model`` with these blocks swapped in; its forward is GPT2Model's, unforked,
which hands our extra keyword ``entity_states`` down to every block.

Entity memory (the "persistent set of entities")
------------------------------------------------
``entity_memory`` is an :class:`EntityMemory`: ``states`` (B, S, C), one slot per entity of the document in
row ``b``, and ``written`` (B, S) bool, whether the slot holds a hidden state yet. Slot 0 is the null entity.
Entity ids come from :mod:`lmstudy.entity.data` (0 = not in a mention, 1..K = the document's clusters in
order of first appearance).

- A document starts with no slot written. An unwritten slot reads the *initial entity state*: a vector of
  ones in the paper ("a vector of ones, which allows for minimal noise in the first occurrence of the
  entity"; ``entity_init="ones"``), or a learned vector (``entity_init="learned"``, an ablation the paper
  leaves open: ``GPT2E.initial_entity``, a parameter that starts at ones, so at step 0 both models are the
  same). Slot 0 is never written, so ``E_null`` is that same vector, as in the paper ("E_null, as a vector
  of ones, similar to unseen entity mentions"). The memory grows (unwritten slots) when a chunk holds a
  larger entity id than it has slots.
- Read at the *start* of a forward pass: ``E[b, t] = states[b, id]`` if ``written[b, id]`` else the initial
  state, with ``id = entity_ids[b, t]``.
- Updated at the *end* of the pass: each entity seen in the chunk takes the final hidden state (after
  ``ln_f``, the same vector the LM head reads) at its *last* sub-token in the chunk, i.e. the last token of
  its last mention ("the final hidden representation of the input token, after it is affected by the
  previous entity representation E_i ... replaces E_i"). Slots of entities absent from the chunk keep
  their value. Padding (entity id 0) never writes.
- Carried from chunk to chunk of one document (the training task passes it as the loop's ``carry``) and
  reset (nothing written) where ``new_document`` says a row starts another document, so it never crosses
  documents.
- Returned detached: it holds values, like a truncated-BPTT hidden state; no gradient flows across steps.

When the memory is written: per chunk or per mention (``memory_update``)
-----------------------------------------------------------------------
The paper updates its memory "at the end of each step" of batch size 1, so within a step every mention reads
what earlier steps wrote. ``memory_update="chunk"`` (our default, the paper's reading) does exactly that per
chunk. ``memory_update="mention"`` (the ablation) also lets a token read what mentions *earlier in the same
chunk* wrote, strictly causally, in two passes:

1. pass 1 (no gradient: its states are values, like the memory's) runs the blocks with ``E`` read from the
   memory, as the chunk mode does, and gives hidden states ``h1`` (B, T, C);
2. ``E'[t]`` = ``h1`` at the last sub-token of the latest mention of the same entity that *ends before* t
   (a mention = a maximal run of consecutive sub-tokens with the same entity id, the annotation the model
   sees), else ``E[t]`` from the memory (:func:`mention_states`); a token inside a mention never reads its
   own mention, which has not ended;
3. pass 2 computes the logits with ``E'``; the memory update at the end reads pass 2's hidden states.

``E'[t]`` depends on ``h1`` at positions < t, which depend on tokens and entity ids at positions < t: causal.
The cost is one more forward pass of the blocks (no LM head, no backward): see :func:`training_flops_per_token`.

Causality (why this reading is strictly causal)
-----------------------------------------------
The logits at position t (predicting token t+1) may depend only on tokens and entity ids at positions
<= t. The self-attention and the entity attention are both causally masked. In the chunk mode the entity
states used in a chunk come only from the memory, i.e. from hidden states of *earlier chunks*; nothing
computed in the current pass feeds ``E`` of the same pass. The mention mode (above) adds states of mentions
that end before t, from a first pass. ``E[t]`` uses the entity id of the input token t itself, which is
input, like the token: the annotation says "this token is part of entity 82", not where the mention ends.
``tests/test_entity_gpt2.py`` checks, for both modes, that editing tokens or entity ids at positions >= t
leaves the logits at positions < t unchanged.

Initialisation and cost
-----------------------
New weights follow GPT-2 (normal, std ``initializer_range``; residual projections scaled by
1/sqrt(paths x n_layer), the entity layer counting as a third path per block). The entity sub-layer costs
4 C^2 multiply-adds per token (query/value, key and output projections) plus one attention, a third of a
GPT-2 block's 12 C^2; :func:`training_flops_per_token` counts it (PaLM's 6N + 12 L d T rule, as
:func:`lmstudy.base.flops_per_token` does for GPT-2). The paper reports +3% time per step (0.298 s vs
0.290 s); ``lmstudy.entity.timing.step_time_run`` and ``benchmarks/bench_entity_gpt2.py`` measure ours.

Saving: ``GPT2E.save_pretrained(path)`` writes a Hugging Face folder (safetensors + ``config.json`` with
``model_type`` "gpt2e" and the entity options); ``GPT2E.from_pretrained(path)`` (or ``GPT2EConfig
.from_pretrained``) reads it back.

Not supported: ``past_key_values`` / incremental generation (the entity layer keeps no key/value cache), and
attention masks (batches are right-padded, which a causal model needs no mask for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, PretrainedConfig
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.models.gpt2.modeling_gpt2 import GPT2Block, GPT2Model, GPT2PreTrainedModel
from transformers.pytorch_utils import Conv1D

NULL_ENTITY = 0  # entity id of tokens outside every mention; memory slot 0 is E_null
ENTITY_INITS = ("ones", "learned")  # what an unwritten memory slot (and E_null) reads
MEMORY_UPDATES = ("chunk", "mention")  # when mentions write the memory: end of the chunk, or after each mention


class EntityOptions:
    """The entity options of a model config (module docstring), for GPT-2 (:class:`GPT2EConfig`) and Llama
    (:class:`lmstudy.entity.llama.LlamaEConfig`) alike:

    - ``entity_layers``: indices of the blocks with entity attention (None: all, the paper; []: the plain model);
    - ``entity_init``: ``"ones"`` (the paper) or ``"learned"``: the initial entity state and ``E_null``;
    - ``memory_update``: ``"chunk"`` (written at the end of the chunk, the paper's per-step update) or
      ``"mention"`` (also within the chunk, after each mention ends: two passes).
    """

    def set_entity_options(self, entity_layers: list[int] | None, entity_init: str, memory_update: str) -> None:
        if entity_init not in ENTITY_INITS:
            raise ValueError(f"entity_init {entity_init!r} is not one of {ENTITY_INITS}")
        if memory_update not in MEMORY_UPDATES:
            raise ValueError(f"memory_update {memory_update!r} is not one of {MEMORY_UPDATES}")
        self.entity_layers = None if entity_layers is None else [int(i) for i in entity_layers]
        self.entity_init = entity_init
        self.memory_update = memory_update

    def has_entity_layer(self, index: int) -> bool:
        """Whether block ``index`` gets the entity attention sub-layer."""
        return self.entity_layers is None or index in self.entity_layers

    @property
    def n_entity_layers(self) -> int:
        """How many blocks have entity attention."""
        return sum(self.has_entity_layer(index) for index in range(self.num_hidden_layers))


class GPT2EConfig(EntityOptions, GPT2Config):
    """``GPT2Config`` plus the entity options (:class:`EntityOptions`)."""

    model_type = "gpt2e"

    def __init__(self, entity_layers: list[int] | None = None, entity_init: str = "ones",
                 memory_update: str = "chunk", **kwargs):
        super().__init__(**kwargs)
        self.set_entity_options(entity_layers, entity_init, memory_update)


class EntityAttention(nn.Module):
    """Causal multi-head attention: queries and values from the hidden states, keys from entity states."""

    def __init__(self, config: GPT2Config):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        self.ln_e = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.qv_attn = Conv1D(2 * config.n_embd, config.n_embd)  # hidden -> (query, value)
        self.k_attn = Conv1D(config.n_embd, config.n_embd)  # entity state -> key
        self.c_proj = Conv1D(config.n_embd, config.n_embd)
        self.attn_pdrop = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor, entity_states: torch.Tensor) -> torch.Tensor:
        q, v = self.qv_attn(self.ln_e(hidden_states)).split(self.n_embd, dim=2)  # (B, T, C) each
        k = self.k_attn(entity_states.to(hidden_states.dtype))  # (B, T, C)
        y = causal_entity_attention(q, k, v, self.n_head, self.attn_pdrop if self.training else 0.0)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    @torch.no_grad()
    def zero_output(self) -> None:
        """Zero the output projection: the sub-layer then adds nothing."""
        self.c_proj.weight.zero_()
        self.c_proj.bias.zero_()


def causal_entity_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_head: int,
                            dropout: float = 0.0) -> torch.Tensor:
    """Causal multi-head attention of queries and values (from the hidden states) over keys (from the entity
    states): (B, T, C) x 3 -> (B, T, C)."""
    B, T, C = q.shape
    q, k, v = (x.view(B, T, n_head, C // n_head).transpose(1, 2) for x in (q, k, v))  # (B, T, C) -> (B, nh, T, hs)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)  # (B, nh, T, hs)
    return y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)


class EntityTransformerBlock(GPT2Block):
    """A ``GPT2Block`` followed by entity attention (with a residual connection)."""

    def __init__(self, config: GPT2Config, layer_idx: int | None = None):
        super().__init__(config, layer_idx=layer_idx)
        self.entity_attn = EntityAttention(config)

    def forward(self, hidden_states, *args, entity_states: torch.Tensor | None = None, **kwargs):
        hidden_states = super().forward(hidden_states, *args, **kwargs)
        if entity_states is None:
            raise ValueError("an EntityTransformerBlock needs entity_states (B, T, C)")
        return hidden_states + self.entity_attn(hidden_states, entity_states)


class EntityMemory(NamedTuple):
    """The entity memory of a batch's rows: ``states`` (B, S, C) and ``written`` (B, S) bool (module docstring).

    A tuple, so that the training loop checkpoints it as the carry (a plain tuple comes back; the model
    accepts either)."""

    states: torch.Tensor
    written: torch.Tensor


@dataclass
class GPT2EOutput(ModelOutput):
    """``logits`` (B, T, V), ``entity_memory`` after this chunk (None without entity layers),
    ``last_hidden_state`` (B, T, C) after ``ln_f``, ``entity_states`` (B, T, C): the ``E`` the entity
    attention read (None without entity layers)."""

    logits: torch.Tensor | None = None
    entity_memory: EntityMemory | None = None
    last_hidden_state: torch.Tensor | None = None
    entity_states: torch.Tensor | None = None


def initial_memory(batch_size: int, n_slots: int, n_embd: int, device=None, dtype=torch.float32) -> EntityMemory:
    """A fresh entity memory: no slot written (states hold ones, which unwritten slots never show)."""
    return EntityMemory(torch.ones(batch_size, n_slots, n_embd, device=device, dtype=dtype),  # (B, S, C)
                        torch.zeros(batch_size, n_slots, dtype=torch.bool, device=device))  # (B, S)


def read_entities(memory: EntityMemory, entity_ids: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
    """E[b, t] = states[b, id] where that slot is written, else ``initial`` (C,); id = entity_ids[b, t].

    (B, S, C) + (B, S), (B, T), (C,) -> (B, T, C). Gradients reach ``initial`` (a learned initial state)."""
    index = entity_ids.unsqueeze(-1).expand(-1, -1, memory.states.size(-1))  # (B, T, C)
    states = memory.states.gather(1, index)  # (B, T, C)
    written = memory.written.gather(1, entity_ids).unsqueeze(-1)  # (B, T, 1)
    return torch.where(written, states, initial.to(states.dtype))


def update_memory(memory: EntityMemory, entity_ids: torch.Tensor, hidden: torch.Tensor) -> EntityMemory:
    """Each entity present in a row takes the hidden state at its last position there; slot 0 never changes.

    (B, S, C) + (B, S), (B, T), (B, T, C) -> the new memory, detached.
    """
    B, T = entity_ids.shape
    positions = torch.arange(T, device=entity_ids.device).expand(B, T)  # (B, T)
    last = torch.full(memory.written.shape, -1, dtype=torch.long, device=entity_ids.device)  # (B, S)
    last.scatter_reduce_(1, entity_ids, positions, reduce="amax", include_self=True)
    last[:, NULL_ENTITY] = -1  # E_null is constant
    index = last.clamp(min=0).unsqueeze(-1).expand(-1, -1, hidden.size(-1))  # (B, S, C)
    written = hidden.detach().to(memory.states.dtype).gather(1, index)  # (B, S, C)
    present = last >= 0  # (B, S)
    return EntityMemory(torch.where(present.unsqueeze(-1), written, memory.states.detach()),
                        memory.written | present)


def mention_states(entity_ids: torch.Tensor, hidden: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """The mention mode's ``E'`` (module docstring): at each position, ``hidden`` at the last sub-token of the
    latest mention of the same entity that ends *before* it in the chunk, else ``fallback`` (the memory's E).

    A mention is a maximal run of one entity id; position p ends it when the id changes at p + 1.
    (B, T), (B, T, C), (B, T, C) -> (B, T, C).
    """
    B, T = entity_ids.shape
    following = F.pad(entity_ids[:, 1:], (0, 1), value=-1)  # (B, T): the id at p + 1 (-1 after the chunk)
    ends = (entity_ids != NULL_ENTITY) & (entity_ids != following)  # (B, T): p ends a mention
    positions = torch.arange(T, device=entity_ids.device)
    same = entity_ids.unsqueeze(2) == entity_ids.unsqueeze(1)  # (B, T, T): [b, t, p] same entity at t and p
    before = positions.view(1, T, 1) > positions.view(1, 1, T)  # (1, T, T): p < t
    sources = same & before & ends.unsqueeze(1) & (entity_ids != NULL_ENTITY).unsqueeze(2)  # (B, T, T)
    latest = torch.where(sources, positions.view(1, 1, T), -1).amax(dim=2)  # (B, T): -1 where none
    index = latest.clamp(min=0).unsqueeze(-1).expand(-1, -1, hidden.size(-1))  # (B, T, C)
    return torch.where((latest >= 0).unsqueeze(-1), hidden.gather(1, index).to(fallback.dtype), fallback)


def training_flops_per_token(config: PretrainedConfig, seq_len: int) -> float:
    """Training FLOPs per token of GPT2E or LlamaE (or of the plain model with ``entity_layers=[]``, or a plain
    ``GPT2Config`` / ``LlamaConfig``).

    The base's count is PaLM's rule, 6 (N + d V) + 12 L d T: for GPT-2 :func:`lmstudy.base.flops_per_token`, for a
    Llama N from :func:`lmstudy.llama_size.llama_non_embedding_parameters` (grouped-query attention still attends
    with d = heads x head size). Each entity layer adds its parameters to N (GPT-2: 4 d^2 + 6 d, ln_e, query/value,
    key, output projection with biases; Llama: 4 d^2 + d, bias-free, an RMSNorm) and one attention (another
    12 d T). The mention mode adds a forward pass of the blocks without the LM head (2 N' + 4 L' d T, N' and L'
    counting the entity layers too) and no backward.
    """
    from lmstudy.base import BaseModelConfig, flops_per_token, non_embedding_parameters

    d, n_layer = config.hidden_size, config.num_hidden_layers  # GPT2Config maps these to n_embd, n_layer
    if isinstance(config, LlamaConfig):
        from lmstudy.llama_size import llama_non_embedding_parameters

        blocks = llama_non_embedding_parameters(config)
        flops = 6 * (blocks + d * config.vocab_size) + 12 * n_layer * d * seq_len
        per_entity_layer = 4 * d * d + d
    else:
        model = BaseModelConfig(n_layer=n_layer, n_head=config.num_attention_heads, n_embd=d, seq_len=seq_len)
        blocks = non_embedding_parameters(model)
        flops = flops_per_token(model, config.vocab_size)
        per_entity_layer = 4 * d * d + 6 * d
    n_entity = getattr(config, "n_entity_layers", 0)
    entity_parameters = n_entity * per_entity_layer
    flops += 6 * entity_parameters + 12 * n_entity * d * seq_len
    if n_entity and getattr(config, "memory_update", "chunk") == "mention":
        flops += 2 * (blocks + entity_parameters) + 4 * (n_layer + n_entity) * d * seq_len
    return float(flops)


class GPT2EModel(GPT2Model):
    """HF's ``GPT2Model`` with ``EntityTransformerBlock``s where ``config.entity_layers`` says.

    Its forward is GPT2Model's, unforked: it passes our extra keyword (``entity_states``) down to every
    block (a plain ``GPT2Block`` ignores it).
    """

    config_class = GPT2EConfig

    def post_init(self):
        # GPT2Model.__init__ builds plain blocks and calls post_init last, which initialises the weights:
        # swap the entity blocks in first, so initialisation sees the final module tree.
        for index in range(self.config.n_layer):
            if self.config.has_entity_layer(index) and not isinstance(self.h[index], EntityTransformerBlock):
                self.h[index] = EntityTransformerBlock(self.config, layer_idx=index)
        super().post_init()
        self._scale_residual_projections()

    @torch.no_grad()
    def _scale_residual_projections(self) -> None:
        """GPT-2's scaled init of the projections that write into the residual stream, std / sqrt(paths).

        HF applies it in ``_init_weights`` on GPT2Attention / GPT2MLP, but treats classes defined outside
        transformers (ours) as custom code and skips modules without parameters of their own, so those
        calls never happen here. We count the entity layer as a third residual path per block. ``init``'s
        functions skip weights already loaded (from_pretrained), like HF's own initialisation.
        """
        paths = 3 if self.config.entity_layers is None or self.config.entity_layers else 2
        std = self.config.initializer_range / (paths * self.config.n_layer) ** 0.5
        for block in self.h:
            projections = [block.attn.c_proj, block.mlp.c_proj]
            if isinstance(block, EntityTransformerBlock):
                projections.append(block.entity_attn.c_proj)
            for projection in projections:
                init.normal_(projection.weight, mean=0.0, std=std)


class EntityLM:
    """What the entity language models share (GPT2E here, :class:`lmstudy.entity.llama.LlamaE`): the memory, the
    entity states read from it, and the forward pass (module docstring). A subclass provides ``backbone()`` (the
    decoder stack: its forward hands ``entity_states`` to every block), ``blocks()`` and ``lm_head``."""

    def add_initial_entity(self, config) -> None:
        """With ``entity_init="learned"``: the learned initial entity state, starting at the paper's ones (so the
        learned-init model begins as the paper's model)."""
        if config.entity_init == "learned" and config.n_entity_layers:
            self.initial_entity = nn.Parameter(torch.ones(config.hidden_size))

    def _init_weights(self, module):
        super()._init_weights(module)
        if module is self and hasattr(self, "initial_entity"):
            init.ones_(self.initial_entity)

    def backbone(self) -> nn.Module:
        raise NotImplementedError

    def blocks(self) -> nn.ModuleList:
        raise NotImplementedError

    @property
    def has_entity_layers(self) -> bool:
        """Whether any block has entity attention (False: the plain baseline)."""
        return any(hasattr(block, "entity_attn") for block in self.blocks())

    @torch.no_grad()
    def zero_entity_output(self) -> None:
        """Zero every entity attention output projection: the model then computes its base model exactly."""
        for block in self.blocks():
            if hasattr(block, "entity_attn"):
                block.entity_attn.zero_output()

    def initial_entity_state(self) -> torch.Tensor:
        """What an unwritten slot and ``E_null`` read (C,): ones, or the learned ``initial_entity``."""
        if hasattr(self, "initial_entity"):
            return self.initial_entity
        return torch.ones(self.config.hidden_size, device=self.lm_head.weight.device)

    def prepare_memory(self, entity_ids: torch.Tensor, memory: EntityMemory | tuple | None,
                       new_document: torch.Tensor | None) -> EntityMemory:
        """The memory to read for this chunk: fresh where ``new_document``, grown to fit the ids."""
        B, n_embd = entity_ids.size(0), self.config.hidden_size
        n_slots = int(entity_ids.max().item()) + 1 if entity_ids.numel() else 1
        if memory is None:
            return initial_memory(B, n_slots, n_embd, entity_ids.device)
        states, written = memory
        if states.shape[0] != B or states.shape[2] != n_embd or written.shape != states.shape[:2]:
            raise ValueError(f"entity memory has shapes {tuple(states.shape)} and {tuple(written.shape)}, "
                             f"expected ({B}, S, {n_embd}) and ({B}, S)")
        if states.size(1) < n_slots:
            grown = initial_memory(B, n_slots - states.size(1), n_embd, states.device, states.dtype)
            states = torch.cat([states, grown.states], dim=1)  # (B, S', C)
            written = torch.cat([written, grown.written], dim=1)  # (B, S')
        if new_document is not None:
            restart = new_document.to(states.device).view(B, 1)  # (B, 1)
            states = torch.where(restart.unsqueeze(-1), torch.ones_like(states), states)
            written = written & ~restart
        return EntityMemory(states, written)

    def forward(
        self,
        input_ids: torch.Tensor,
        entity_ids: torch.Tensor | None = None,
        entity_memory: EntityMemory | tuple | None = None,
        new_document: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> GPT2EOutput:
        """Logits for ``input_ids`` (B, T) given per-token ``entity_ids`` (B, T; 0 = null; None: all null).

        ``entity_memory`` is what the previous chunk of the same documents returned (None: all documents
        start here); ``new_document`` (B,) bool resets the rows that start a new document.
        No loss here (and no HF ``labels``, which HF shifts internally): the loss against already shifted
        targets is :func:`lmstudy.entity.data.batch_loss`, as :func:`lmstudy.lm_batches.lm_loss` for GPT-2.
        """
        if entity_ids is None:
            entity_ids = torch.full_like(input_ids, NULL_ENTITY)
        if entity_ids.shape != input_ids.shape:
            raise ValueError(f"entity_ids {tuple(entity_ids.shape)} must match input_ids {tuple(input_ids.shape)}")
        entity_ids = entity_ids.long()
        kwargs = {"position_ids": position_ids, "use_cache": False, **kwargs}
        if not self.has_entity_layers:
            hidden = self.backbone()(input_ids, **kwargs).last_hidden_state  # (B, T, C)
            return GPT2EOutput(logits=self.lm_head(hidden), last_hidden_state=hidden)
        memory = self.prepare_memory(entity_ids, entity_memory, new_document)
        entity_states = read_entities(memory, entity_ids, self.initial_entity_state())  # (B, T, C)
        if self.config.memory_update == "mention":
            with torch.no_grad():  # pass 1: values, like the memory's (module docstring)
                first = self.backbone()(input_ids, entity_states=entity_states, **kwargs).last_hidden_state
            entity_states = mention_states(entity_ids, first, entity_states)  # (B, T, C)
        hidden = self.backbone()(input_ids, entity_states=entity_states, **kwargs).last_hidden_state  # (B, T, C)
        logits = self.lm_head(hidden)  # (B, T, V)
        return GPT2EOutput(logits=logits, entity_memory=update_memory(memory, entity_ids, hidden),
                           last_hidden_state=hidden, entity_states=entity_states)


class GPT2E(EntityLM, GPT2PreTrainedModel):
    """GPT-2 language model with Entity-Transformer blocks; parameter names match ``GPT2LMHeadModel``
    (plus ``transformer.h.*.entity_attn.*`` and, with ``entity_init="learned"``, ``initial_entity``)."""

    config_class = GPT2EConfig
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPT2EConfig):
        super().__init__(config)
        self.transformer = GPT2EModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.add_initial_entity(config)
        self.post_init()

    def backbone(self) -> nn.Module:
        return self.transformer

    def blocks(self) -> nn.ModuleList:
        return self.transformer.h

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, new_embeddings):
        self.transformer.wte = new_embeddings

    @classmethod
    def from_gpt2(cls, gpt2: GPT2LMHeadModel, entity_layers: list[int] | None = None, entity_init: str = "ones",
                  memory_update: str = "chunk") -> "GPT2E":
        """GPT2E with ``gpt2``'s weights and a zero entity output projection: initially exactly GPT-2."""
        return with_entity_layers(cls, GPT2EConfig, gpt2, entity_layers, entity_init, memory_update)


def with_entity_layers(model_class, config_class, base: nn.Module, entity_layers: list[int] | None,
                       entity_init: str, memory_update: str):
    """``model_class`` (an :class:`EntityLM`) with ``base``'s weights (a GPT-2 or a Llama of the same shape) and a
    zero entity output projection: initially exactly ``base``."""
    settings = {k: v for k, v in base.config.to_diff_dict().items() if k not in ("model_type", "architectures")}
    config = config_class(entity_layers=entity_layers, entity_init=entity_init, memory_update=memory_update,
                          **settings)
    model = model_class(config)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(".entity_attn." not in key and key != "initial_entity" for key in missing):
        raise ValueError(f"{type(base).__name__} weights do not fit {model_class.__name__}: missing {missing}, "
                         f"unexpected {unexpected}")
    model.zero_entity_output()
    return model
