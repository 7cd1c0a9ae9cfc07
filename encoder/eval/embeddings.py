"""Sentence embeddings: unit vectors from any model's encoder under a pooling rule, and
exact cosine nearest neighbours (the `embed` job, the suite's frozen-embedding tasks)."""
import jax
import numpy as np

from encoder.eval import inference
from encoder.model import heads, models
from encoder.model.encoder import encoder_params


def embed_texts(model_cfg, params, tokenizer, texts, pooling="mean", max_len=128,
                batch_size=64, shard=None) -> np.ndarray:
    """[N, D] float32 unit vectors for texts (params: any model's or the encoder's)."""
    model = models.Embedder(models.freeze(model_cfg), pooling=pooling)
    variables = {"encoder": encoder_params(params)}
    if pooling in heads.PARAMETRIC_POOLING:
        if "pooler" not in params:
            raise ValueError(f"pooling={pooling} needs pooler parameters in the checkpoint")
        variables["head"] = params["pooler"]
    if not len(texts):
        return np.zeros((0, model_cfg.hidden_size), np.float32)
    fn = jax.jit(lambda v, b: model.apply({"params": v}, b["input_ids"], b["segment_ids"],
                                          b["attention_mask"])[0])
    arrays = inference.encode_texts(tokenizer, list(texts), max_len)
    return inference.predict(fn, variables, arrays, batch_size, shard)


def nearest(vectors: np.ndarray, queries: np.ndarray, k: int = 5):
    """Cosine nearest neighbours of unit vectors: (indices [Q, k], scores [Q, k])."""
    sims = queries @ vectors.T
    k = min(k, vectors.shape[0])
    idx = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(sims, idx, axis=1)
