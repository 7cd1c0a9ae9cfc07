"""A functional JAX/Flax encoder codebase (BERT / RoBERTa / ELECTRA / ModernBERT).

`encode(config, params, input_ids, segment_ids=None, attention_mask=None)` is
the encoder g(x; θ) as a pure function: it returns hidden states [B, T, D].

`encode` is imported on first use, so that `encoder.data` (the corpus
preparation workers in particular) loads without JAX.
"""

__all__ = ["encode"]


def __getattr__(name):
    if name == "encode":
        from encoder.model.encoder import encode
        return encode
    raise AttributeError(f"module 'encoder' has no attribute {name!r}")
