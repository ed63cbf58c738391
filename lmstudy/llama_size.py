"""Parameter counts of a Llama-family model from its config alone (no weights): what the Krony study's size classes
(:mod:`lmstudy.krony.llama`) and the entity study's FLOP count (:func:`lmstudy.entity.model.training_flops_per_token`)
read for SmolLM2."""

from __future__ import annotations

from transformers import LlamaConfig


def llama_layer_parameters(model_config: LlamaConfig) -> int:
    """Parameters of one decoder layer: attention (grouped-query), the gated MLP and the two RMSNorms' weights."""
    d, inner = model_config.hidden_size, model_config.intermediate_size
    head_dim = getattr(model_config, "head_dim", None) or d // model_config.num_attention_heads
    q_out, kv_out = model_config.num_attention_heads * head_dim, model_config.num_key_value_heads * head_dim
    attention = d * q_out + 2 * d * kv_out + q_out * d
    if getattr(model_config, "attention_bias", False):
        attention += q_out + 2 * kv_out + d
    mlp = 3 * d * inner + ((2 * inner + d) if getattr(model_config, "mlp_bias", False) else 0)
    return attention + mlp + 2 * d


def llama_non_embedding_parameters(model_config: LlamaConfig) -> int:
    """Parameters of the decoder layers and the final norm (no token embedding, no output matrix)."""
    return model_config.num_hidden_layers * llama_layer_parameters(model_config) + model_config.hidden_size


def llama_parameter_count(model_config: LlamaConfig) -> int:
    """Parameters of a dense ``LlamaForCausalLM`` from its config alone (no weights)."""
    embedding = model_config.vocab_size * model_config.hidden_size
    lm_head = 0 if model_config.tie_word_embeddings else embedding
    return embedding + llama_non_embedding_parameters(model_config) + lm_head


__all__ = ["llama_layer_parameters", "llama_non_embedding_parameters", "llama_parameter_count"]
