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
of, or ``E_null`` (a vector of ones) for tokens outside every mention. The same ``E`` feeds every block
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
``entity_memory`` (B, S, C): one slot per entity of the document in row ``b``; slot 0 is the null entity.
Entity ids come from :mod:`lmstudy.entity.data` (0 = not in a mention, 1..K = the document's clusters in
order of first appearance).

- A document starts with every slot at ones ("a vector of ones, which allows for minimal noise in the first
  occurrence of the entity"); slot 0 stays ones for ever (``E_null``). The memory grows (with ones) when a
  chunk holds a larger entity id than it has slots.
- Read at the *start* of a forward pass: ``E[b, t] = memory[b, entity_ids[b, t]]``.
- Updated at the *end* of the pass: each entity seen in the chunk takes the final hidden state (after
  ``ln_f``, the same vector the LM head reads) at its *last* sub-token in the chunk, i.e. the last token of
  its last mention ("the final hidden representation of the input token, after it is affected by the
  previous entity representation E_i ... replaces E_i"). Slots of entities absent from the chunk keep
  their value. Padding (entity id 0) never writes.
- Carried from chunk to chunk of one document (the training task passes it as the loop's ``carry``) and
  reset to ones where ``new_document`` says a row starts another document, so it never crosses documents.
- Returned detached: it holds values, like a truncated-BPTT hidden state; no gradient flows across steps.

Causality (why this reading is strictly causal)
-----------------------------------------------
The logits at position t (predicting token t+1) may depend only on tokens and entity ids at positions
<= t. The self-attention and the entity attention are both causally masked. The entity states used in a
chunk come only from the memory, i.e. from hidden states of *earlier chunks*; nothing computed in the
current pass feeds ``E`` of the same pass. (Using, within the chunk, the states of mentions that end before
t would also be causal, but needs a second forward pass per chunk; the paper reads the memory once per step
and writes it at the end, and so do we.) ``E[t]`` uses the entity id of the input token t itself, which is
input, like the token: the annotation says "this token is part of entity 82", not where the mention ends.
``tests/test_entity_gpt2.py`` checks that editing tokens or entity ids at positions >= t leaves the logits
at positions < t unchanged.

Initialisation and cost
-----------------------
New weights follow GPT-2 (normal, std ``initializer_range``; residual projections scaled by
1/sqrt(paths x n_layer), the entity layer counting as a third path per block). The entity sub-layer costs
about 4 C^2 multiply-adds per token (query/value, key and output projections) plus one attention, a third
of a GPT-2 block's 12 C^2: roughly +20% FLOPs for GPT-2 small, where the paper reports +3% time per step
(0.298 s vs 0.290 s); ``benchmarks/bench_entity_gpt2.py`` measures ours.

Not supported: ``past_key_values`` / incremental generation (the entity layer keeps no key/value cache), and
attention masks (batches are right-padded, which a causal model needs no mask for).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.models.gpt2.modeling_gpt2 import GPT2Block, GPT2Model, GPT2PreTrainedModel
from transformers.pytorch_utils import Conv1D

NULL_ENTITY = 0  # entity id of tokens outside every mention; memory slot 0 is E_null


class GPT2EConfig(GPT2Config):
    """``GPT2Config`` plus ``entity_layers``: indices of the blocks with entity attention (None: all)."""

    model_type = "gpt2e"

    def __init__(self, entity_layers: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.entity_layers = None if entity_layers is None else [int(i) for i in entity_layers]

    def has_entity_layer(self, index: int) -> bool:
        return self.entity_layers is None or index in self.entity_layers


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
        B, T, C = hidden_states.shape
        q, v = self.qv_attn(self.ln_e(hidden_states)).split(C, dim=2)  # (B, T, C) each
        k = self.k_attn(entity_states.to(hidden_states.dtype))  # (B, T, C)
        # (B, T, C) -> (B, nh, T, hs)
        q, k, v = (x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for x in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.attn_pdrop if self.training else 0.0
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


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


@dataclass
class GPT2EOutput(ModelOutput):
    """``logits`` (B, T, V), ``entity_memory`` (B, S, C) after this chunk (None without entity layers),
    ``last_hidden_state`` (B, T, C) after ``ln_f``."""

    logits: torch.Tensor | None = None
    entity_memory: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None


def initial_memory(batch_size: int, n_slots: int, n_embd: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """A fresh entity memory: every entity (and the null slot 0) is a vector of ones. (B, S, C)"""
    return torch.ones(batch_size, n_slots, n_embd, device=device, dtype=dtype)


def read_entities(memory: torch.Tensor, entity_ids: torch.Tensor) -> torch.Tensor:
    """E[b, t] = memory[b, entity_ids[b, t]]: (B, S, C), (B, T) -> (B, T, C)."""
    index = entity_ids.unsqueeze(-1).expand(-1, -1, memory.size(-1))  # (B, T, C)
    return memory.gather(1, index)


def update_memory(memory: torch.Tensor, entity_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """Each entity present in a row takes the hidden state at its last position there; slot 0 never changes.

    (B, S, C), (B, T), (B, T, C) -> (B, S, C), detached.
    """
    B, T = entity_ids.shape
    positions = torch.arange(T, device=entity_ids.device).expand(B, T)  # (B, T)
    last = torch.full(memory.shape[:2], -1, dtype=torch.long, device=entity_ids.device)  # (B, S)
    last.scatter_reduce_(1, entity_ids, positions, reduce="amax", include_self=True)
    last[:, NULL_ENTITY] = -1  # E_null is constant
    index = last.clamp(min=0).unsqueeze(-1).expand(-1, -1, hidden.size(-1))  # (B, S, C)
    written = hidden.detach().to(memory.dtype).gather(1, index)  # (B, S, C)
    return torch.where((last >= 0).unsqueeze(-1), written, memory.detach())


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


class GPT2E(GPT2PreTrainedModel):
    """GPT-2 language model with Entity-Transformer blocks; parameter names match ``GPT2LMHeadModel``."""

    config_class = GPT2EConfig
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPT2EConfig):
        super().__init__(config)
        self.transformer = GPT2EModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    @property
    def has_entity_layers(self) -> bool:
        return any(isinstance(block, EntityTransformerBlock) for block in self.transformer.h)

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, new_embeddings):
        self.transformer.wte = new_embeddings

    @classmethod
    def from_gpt2(cls, gpt2: GPT2LMHeadModel, entity_layers: list[int] | None = None) -> "GPT2E":
        """GPT2E with ``gpt2``'s weights and a zero entity output projection: initially exactly GPT-2."""
        settings = {k: v for k, v in gpt2.config.to_diff_dict().items() if k not in ("model_type", "architectures")}
        config = GPT2EConfig(entity_layers=entity_layers, **settings)
        model = cls(config)
        missing, unexpected = model.load_state_dict(gpt2.state_dict(), strict=False)
        if unexpected or any(".entity_attn." not in key for key in missing):
            raise ValueError(f"GPT-2 weights do not fit GPT2E: missing {missing}, unexpected {unexpected}")
        model.zero_entity_output()
        return model

    @torch.no_grad()
    def zero_entity_output(self) -> None:
        """Zero every entity attention output projection: the model then computes GPT-2 exactly."""
        for block in self.transformer.h:
            if isinstance(block, EntityTransformerBlock):
                block.entity_attn.c_proj.weight.zero_()
                block.entity_attn.c_proj.bias.zero_()

    def prepare_memory(
        self, entity_ids: torch.Tensor, memory: torch.Tensor | None, new_document: torch.Tensor | None
    ) -> torch.Tensor:
        """The memory to read for this chunk: fresh (ones) where ``new_document``, grown to fit the ids."""
        B, n_embd = entity_ids.size(0), self.config.n_embd
        n_slots = int(entity_ids.max().item()) + 1 if entity_ids.numel() else 1
        if memory is None:
            return initial_memory(B, n_slots, n_embd, entity_ids.device)
        if memory.shape[0] != B or memory.shape[2] != n_embd:
            raise ValueError(f"entity_memory has shape {tuple(memory.shape)}, expected ({B}, S, {n_embd})")
        if memory.size(1) < n_slots:
            grown = initial_memory(B, n_slots - memory.size(1), n_embd, memory.device, memory.dtype)
            memory = torch.cat([memory, grown], dim=1)  # (B, S', C)
        if new_document is not None:
            memory = torch.where(new_document.view(B, 1, 1).to(memory.device), torch.ones_like(memory), memory)
        return memory

    def forward(
        self,
        input_ids: torch.Tensor,
        entity_ids: torch.Tensor | None = None,
        entity_memory: torch.Tensor | None = None,
        new_document: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> GPT2EOutput:
        """Logits for ``input_ids`` (B, T) given per-token ``entity_ids`` (B, T; 0 = null; None: all null).

        ``entity_memory`` (B, S, C) is what the previous chunk of the same documents returned (None: all
        documents start here); ``new_document`` (B,) bool resets the rows that start a new document.
        No loss here (and no HF ``labels``, which HF shifts internally): the loss against already shifted
        targets is :func:`lmstudy.entity.data.batch_loss`, as :func:`lmstudy.lm_batches.lm_loss` for GPT-2.
        """
        if entity_ids is None:
            entity_ids = torch.full_like(input_ids, NULL_ENTITY)
        if entity_ids.shape != input_ids.shape:
            raise ValueError(f"entity_ids {tuple(entity_ids.shape)} must match input_ids {tuple(input_ids.shape)}")
        entity_ids = entity_ids.long()
        memory, entity_states = None, None
        if self.has_entity_layers:
            memory = self.prepare_memory(entity_ids, entity_memory, new_document)
            entity_states = read_entities(memory, entity_ids)  # (B, T, C)
            kwargs["entity_states"] = entity_states
        hidden = self.transformer(input_ids, position_ids=position_ids, use_cache=False, **kwargs).last_hidden_state
        logits = self.lm_head(hidden)  # (B, T, V)
        if memory is not None:
            memory = update_memory(memory, entity_ids, hidden)
        return GPT2EOutput(logits=logits, entity_memory=memory, last_hidden_state=hidden)

