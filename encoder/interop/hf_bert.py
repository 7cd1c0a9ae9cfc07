"""Import a HuggingFace BERT-family checkpoint folder into this codebase.

`load(checkpoint_dir) -> (model_config, params)` reads config.json and
model.safetensors (or pytorch_model.bin, through torch) and returns a model
config plus a params tree {'encoder': ..., 'pooler': ..., 'mlm_head': ...}
(the last two when the checkpoint has them). `encode(cfg, params, ...)` reads
it directly.

    python -m encoder.interop.hf_bert --checkpoint DIR --out DIR

writes it as an orbax checkpoint.

Layout notes: HF stores Linear weights as [out, in]; ours are [in, out]. Our
attention uses one fused QKV kernel [D, 3, H, K], so query/key/value are
stacked; the output projection is [H, K, D].
"""
import json
import os

import numpy as np

from encoder import config as config_lib

_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}


def _read_tensors(checkpoint_dir: str) -> dict[str, np.ndarray]:
    st = os.path.join(checkpoint_dir, "model.safetensors")
    if os.path.exists(st):
        from safetensors.numpy import load_file
        return dict(load_file(st))
    pt = os.path.join(checkpoint_dir, "pytorch_model.bin")
    if os.path.exists(pt):
        import torch  # only for the legacy format
        state = torch.load(pt, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"{checkpoint_dir}: expected model.safetensors or pytorch_model.bin")


def config_from_hf(hf: dict):
    """Translates a HF BertConfig dict into this codebase's model config."""
    if hf.get("model_type", "bert") != "bert":
        # RoBERTa offsets its position ids by padding_idx + 1, ELECTRA/ALBERT factorize
        # differently: importing them as BERT would be silently wrong.
        raise ValueError(f"model_type {hf['model_type']!r} is not supported; only 'bert' "
                         "checkpoints import (MiniLM, BERT, and other BertModel layouts)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={hf['position_embedding_type']!r} is not "
                         "supported; only 'absolute' BERT checkpoints import")
    act = hf.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"hidden_act {act!r} not supported; known: {sorted(_ACTIVATIONS)}")
    needed = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size")
    missing = [k for k in needed if k not in hf]
    if missing:
        raise ValueError(f"config.json lacks {missing}: not a BERT config")
    cfg = config_lib.model_config("base")
    cfg.size = "hf"
    cfg.vocab_size = hf["vocab_size"]
    cfg.hidden_size = hf["hidden_size"]
    cfg.num_layers = hf["num_hidden_layers"]
    cfg.num_heads = hf["num_attention_heads"]
    cfg.intermediate_size = hf["intermediate_size"]
    cfg.type_vocab_size = hf.get("type_vocab_size", 2)
    cfg.max_position = hf.get("max_position_embeddings", 512)
    cfg.activation = _ACTIVATIONS[act]
    cfg.head_activation = _ACTIVATIONS[act]
    cfg.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    cfg.dropout = hf.get("hidden_dropout_prob", 0.1)
    cfg.attention_dropout = hf.get("attention_probs_dropout_prob", 0.1)
    cfg.initializer_range = hf.get("initializer_range", 0.02)
    cfg.position = "learned"
    cfg.norm = "post_ln"
    return cfg


class _Tensors(dict):
    """A tensor dict whose missing key names the tensor (not a bare KeyError)."""

    def __missing__(self, key):
        raise ValueError(f"the checkpoint has no tensor {key!r} (it has {len(self)} tensors, "
                         f"e.g. {sorted(self)[:3]}): not a BERT-layout checkpoint")


def _strip_prefix(tensors: dict) -> dict:
    """BertModel keys have no prefix; BertFor* keys start with 'bert.'."""
    if any(k.startswith("bert.") for k in tensors):
        return {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}
    return tensors


def _ln(t, prefix):
    return {"scale": t[f"{prefix}.weight"], "bias": t[f"{prefix}.bias"]}


def _dense(t, prefix):
    return {"kernel": t[f"{prefix}.weight"].T, "bias": t[f"{prefix}.bias"]}


def params_from_hf(tensors: dict, cfg) -> dict:
    """Maps HF tensor names to this codebase's params tree."""
    t = _Tensors(_strip_prefix(tensors))
    heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    d = cfg.hidden_size
    embed = {
        "token": {"embedding": t["embeddings.word_embeddings.weight"]},
        "segment": {"embedding": t["embeddings.token_type_embeddings.weight"]},
        "position": {"embedding": t["embeddings.position_embeddings.weight"]},
        "norm": _ln(t, "embeddings.LayerNorm"),
    }
    encoder = {"embed": embed}
    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}"
        qkv_w = np.stack([t[f"{p}.attention.self.{n}.weight"].T for n in ("query", "key", "value")],
                         axis=1)  # [D, 3, D]
        qkv_b = np.stack([t[f"{p}.attention.self.{n}.bias"] for n in ("query", "key", "value")])
        encoder[f"blocks_{i}"] = {
            "attention": {
                "qkv": {"kernel": qkv_w.reshape(d, 3, heads, head_dim),
                        "bias": qkv_b.reshape(3, heads, head_dim)},
                "out": {"kernel": t[f"{p}.attention.output.dense.weight"].T.reshape(
                            heads, head_dim, d),
                        "bias": t[f"{p}.attention.output.dense.bias"]},
            },
            "attention_norm": _ln(t, f"{p}.attention.output.LayerNorm"),
            "mlp": {"wi": _dense(t, f"{p}.intermediate.dense"),
                    "wo": _dense(t, f"{p}.output.dense")},
            "mlp_norm": _ln(t, f"{p}.output.LayerNorm"),
        }
    params = {"encoder": encoder}
    if "pooler.dense.weight" in t:
        params["pooler"] = {"dense": _dense(t, "pooler.dense")}
    if "cls.predictions.transform.dense.weight" in t:
        params["mlm_head"] = {
            "transform": _dense(t, "cls.predictions.transform.dense"),
            "transform_norm": _ln(t, "cls.predictions.transform.LayerNorm"),
            "output_bias": t["cls.predictions.bias"],
        }
    return _as_float32(params)


def _as_float32(tree):
    if isinstance(tree, dict):
        return {k: _as_float32(v) for k, v in tree.items()}
    return np.asarray(tree, dtype=np.float32)


def check_shapes(params: dict, cfg) -> None:
    """Every imported tensor against the shape the config implies (before anything runs)."""
    import jax
    from encoder.model import models
    model = models.MaskedLM(models.freeze(cfg))
    ids = np.ones((1, 4), np.int32)
    expected = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids * 0, ids,
                                                 mlm_positions=np.zeros((1, 1), np.int32)))
    expected = expected["params"]

    def walk(got, want, path):
        for k, v in got.items():
            if k not in want:
                continue  # e.g. the pooler, which the MLM model does not have
            if isinstance(v, dict):
                walk(v, want[k], f"{path}/{k}")
            else:
                shape = tuple(getattr(want[k], "value", want[k]).shape)
                if tuple(v.shape) != shape:
                    raise ValueError(f"tensor {path}/{k} has shape {tuple(v.shape)}, but "
                                     f"config.json implies {shape} (vocab_size, hidden_size, "
                                     "... disagree with the weights)")
    walk(params, expected, "")


def load(checkpoint_dir: str):
    """Reads a HF BERT-family folder: returns (model config, params)."""
    path = os.path.join(checkpoint_dir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{checkpoint_dir}: no config.json (expected a HuggingFace "
                                "model folder)")
    try:
        with open(path) as f:
            hf = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    try:
        cfg = config_from_hf(hf)
        params = params_from_hf(_read_tensors(checkpoint_dir), cfg)
        check_shapes(params, cfg)
    except ValueError as e:
        raise ValueError(f"{checkpoint_dir}: {e}") from None
    return cfg, params


def main(argv):
    del argv
    from absl import flags
    from encoder.checkpoints import store
    from encoder.data import tokenizer as tokenizer_lib
    cfg, params = load(flags.FLAGS.checkpoint)
    store.save_params(flags.FLAGS.out, params, cfg)
    # The vocabulary travels with the parameters, so the folder is a valid init_from.
    tokenizer_lib.load(flags.FLAGS.checkpoint).save(os.path.join(flags.FLAGS.out, "tokenizer"))
    print(f"wrote {flags.FLAGS.out}: {sum(v.size for v in _leaves(params)):,} parameters")


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree


if __name__ == "__main__":
    from absl import app, flags
    flags.DEFINE_string("checkpoint", None, "HuggingFace checkpoint folder", required=True)
    flags.DEFINE_string("out", None, "output directory for the orbax checkpoint", required=True)
    app.run(main)
