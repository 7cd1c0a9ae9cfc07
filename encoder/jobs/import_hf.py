"""Import a HuggingFace checkpoint folder as a params folder of this codebase.

    python -m encoder.interop.hf_bert --checkpoint DIR --out DIR

reads any family encoder/interop/families.py lists (BERT, RoBERTa, ALBERT,
ELECTRA, RoFormer, ModernBERT, DeBERTa-v2; the module keeps its first name)
and writes an orbax params folder with the tokenizer beside it, a valid
init_from. Jobs can also read the HF folder directly with init_from=hf:DIR;
`encoder.interop.hf.load(folder)` returns (model config, params).
"""
import os

from encoder.interop import hf
from encoder.interop.hf import check_shapes, load  # noqa: F401  (the names callers use)


def config_from_hf(hf_config: dict):
    """A HF config.json dict -> this codebase's model config (any supported family)."""
    return hf.family_of(hf_config).config_from_hf(hf_config)


def main(argv):
    del argv
    from absl import flags
    from encoder.checkpoints import store
    from encoder.data import tokenizer as tokenizer_lib
    from absl import logging
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    try:
        cfg, params = load(flags.FLAGS.checkpoint)
        out = flags.FLAGS.out
        if os.path.isfile(out) or (os.path.isdir(out) and os.listdir(out)):
            raise ValueError(f"--out={out} exists and is not empty")
    except (OSError, ValueError) as e:
        raise SystemExit(f"hf_bert: {e}") from None
    store.save_params(flags.FLAGS.out, params, cfg)
    # The vocabulary travels with the parameters, so the folder is a valid init_from.
    tokenizer_lib.load(flags.FLAGS.checkpoint).save(os.path.join(flags.FLAGS.out, "tokenizer"))
    count = sum(v.size for v in _leaves(params))
    print(f"wrote {flags.FLAGS.out}: {count:,} parameters")


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree
