"""A model `mteb` evaluates directly: its encoder protocol over any texts -> vectors function.

    from encoder.jobs.mine import encoder_of
    model = MtebEncoder(encoder_of("hf:DIR")[0], query_prefix="query: ",
                        passage_prefix="passage: ", dim=128)
    mteb.evaluate(model, tasks)

`encode(inputs, *, task_metadata, hf_split, hf_subset, prompt_type)` reads the texts
of mteb's DataLoader batches, prepends the query or passage prefix by prompt type, and
returns unit vectors (cut to a Matryoshka `dim` first); `similarity` is cosine, as
sentence-transformers' default. mteb is imported only for the model's metadata.
"""
import numpy as np


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class MtebEncoder:
    def __init__(self, encode_fn, query_prefix: str = "", passage_prefix: str = "",
                 dim: int = 0, name: str = "encoder/retriever", revision: str = "local"):
        self.encode_fn, self.dim = encode_fn, dim
        self.prefixes = {"query": query_prefix, "document": passage_prefix}
        self.name, self.revision = name, revision

    @property
    def mteb_model_meta(self):
        from mteb.models.model_meta import ModelMeta
        return ModelMeta.create_empty(overwrites=dict(name=self.name, revision=self.revision))

    def encode(self, inputs, *, task_metadata=None, hf_split="", hf_subset="",
               prompt_type=None, **kwargs):
        kind = getattr(prompt_type, "value", prompt_type) or ""
        prefix = self.prefixes.get(kind, "")
        texts = [prefix + t for batch in inputs for t in batch["text"]]
        vecs = np.asarray(self.encode_fn(texts), np.float32)
        return _unit(vecs[:, :self.dim] if self.dim else vecs)

    def similarity(self, a, b):
        return _unit(a) @ _unit(b).T

    def similarity_pairwise(self, a, b):
        return np.sum(_unit(a) * _unit(b), axis=-1)
