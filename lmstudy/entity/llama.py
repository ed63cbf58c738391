"""LlamaE: a Llama-family model (SmolLM2-135M) with the Entity-Transformer sub-layer (issue 50).

The same reading as GPT2E (:mod:`lmstudy.entity.model`, whose docstring is the design): after a decoder layer,

    x = LlamaDecoderLayer(h)                                   # (B, T, C)
    q, v = split(norm_e(x) W_qv)                               # queries and values from the hidden states
    k = E W_k                                                  # keys from the per-token entity states E
    h' = x + o_proj(causal_multi_head_attention(q, k, v))      # residual

with Llama's own conventions: an RMSNorm (``norm_e``) instead of a LayerNorm and bias-free projections. The entity
attention has no rotary position embedding (GPT2E's has no positions either: order comes from the hidden states
and the causal mask). The memory (read at the start of a chunk, written at its end, or per mention) and the forward
pass are GPT2E's, shared through :class:`lmstudy.entity.model.EntityLM`. :meth:`LlamaE.from_llama` starts from a
trained Llama with a zero output projection: exactly the base's logits (``tests/test_entity_llama.py``).

Which layers: ``entity_layers`` as GPT2E (None: all, the paper; a list: those). On SmolLM2 (30 layers) each entity
sub-layer adds ``4 d^2 + d`` = 1.33M parameters; all 30 add 40M (30% of the model) and their attention.
"""

from __future__ import annotations

from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers import initialization as init
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer, LlamaModel, LlamaPreTrainedModel, LlamaRMSNorm,
)

from lmstudy.entity.model import EntityLM, EntityOptions, causal_entity_attention, with_entity_layers


class LlamaEConfig(EntityOptions, LlamaConfig):
    """``LlamaConfig`` plus the entity options (:class:`lmstudy.entity.model.EntityOptions`)."""

    model_type = "llamae"

    def __init__(self, entity_layers: list[int] | None = None, entity_init: str = "ones",
                 memory_update: str = "chunk", **kwargs):
        super().__init__(**kwargs)
        self.set_entity_options(entity_layers, entity_init, memory_update)


class LlamaEntityAttention(nn.Module):
    """Causal multi-head attention, Llama style: queries and values from the hidden states, keys from the entity
    states, RMSNorm, no biases."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_head, self.hidden_size = config.num_attention_heads, config.hidden_size
        if self.hidden_size % self.n_head:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.n_head}")
        self.norm_e = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.qv_proj = nn.Linear(config.hidden_size, 2 * config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.dropout = config.attention_dropout

    def forward(self, hidden_states, entity_states):
        q, v = self.qv_proj(self.norm_e(hidden_states)).split(self.hidden_size, dim=2)  # (B, T, C) each
        k = self.k_proj(entity_states.to(hidden_states.dtype))  # (B, T, C)
        y = causal_entity_attention(q, k, v, self.n_head, self.dropout if self.training else 0.0)  # (B, T, C)
        return self.o_proj(y)

    def zero_output(self) -> None:
        """Zero the output projection: the sub-layer then adds nothing."""
        self.o_proj.weight.zero_()


class LlamaLayerWithoutEntities(LlamaDecoderLayer):
    """A plain decoder layer that takes (and ignores) ``entity_states``, so it never reaches the attention's
    keyword arguments."""

    def forward(self, hidden_states, *args, entity_states=None, **kwargs):
        return super().forward(hidden_states, *args, **kwargs)


class LlamaEntityLayer(LlamaDecoderLayer):
    """A ``LlamaDecoderLayer`` followed by entity attention (with a residual connection)."""

    def __init__(self, config: LlamaConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.entity_attn = LlamaEntityAttention(config)

    def forward(self, hidden_states, *args, entity_states=None, **kwargs):
        hidden_states = super().forward(hidden_states, *args, **kwargs)
        if entity_states is None:
            raise ValueError("a LlamaEntityLayer needs entity_states (B, T, C)")
        return hidden_states + self.entity_attn(hidden_states, entity_states)


class LlamaEModel(LlamaModel):
    """HF's ``LlamaModel`` with entity layers where ``config.entity_layers`` says; its forward is LlamaModel's,
    which hands the extra keyword ``entity_states`` down to every layer."""

    config_class = LlamaEConfig

    def post_init(self):
        # LlamaModel.__init__ builds plain layers and calls post_init last (weight initialisation): swap first.
        for index in range(self.config.num_hidden_layers):
            kind = LlamaEntityLayer if self.config.has_entity_layer(index) else LlamaLayerWithoutEntities
            if type(self.layers[index]) is not kind:
                self.layers[index] = kind(self.config, index)
        super().post_init()


class LlamaE(EntityLM, LlamaPreTrainedModel):
    """A Llama language model with entity layers; parameter names match ``LlamaForCausalLM`` (plus
    ``model.layers.*.entity_attn.*`` and, with ``entity_init="learned"``, ``initial_entity``)."""

    config_class = LlamaEConfig
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: LlamaEConfig):
        super().__init__(config)
        self.model = LlamaEModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.add_initial_entity(config)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LlamaEntityAttention):
            init.ones_(module.norm_e.weight)

    def backbone(self) -> nn.Module:
        return self.model

    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, new_embeddings):
        self.model.embed_tokens = new_embeddings

    @classmethod
    def from_llama(cls, llama: LlamaForCausalLM, entity_layers: list[int] | None = None, entity_init: str = "ones",
                   memory_update: str = "chunk") -> "LlamaE":
        """LlamaE with ``llama``'s weights and a zero entity output projection: initially exactly ``llama``."""
        return with_entity_layers(cls, LlamaEConfig, llama, entity_layers, entity_init, memory_update)


__all__ = ["LlamaE", "LlamaEConfig", "LlamaEModel", "LlamaEntityAttention", "LlamaEntityLayer"]
