"""A functional JAX/Flax encoder codebase (BERT / RoBERTa / ELECTRA / ModernBERT).

`encode(config, params, input_ids, segment_ids=None, attention_mask=None)` is
the encoder g(x; θ) as a pure function: it returns hidden states [B, T, D].
"""
from encoder.model.encoder import encode

__all__ = ["encode"]
