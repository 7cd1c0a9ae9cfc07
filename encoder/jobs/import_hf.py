"""Import a HuggingFace checkpoint folder as a params folder of this codebase.

    python -m encoder import_hf --checkpoint DIR --out DIR

reads any family encoder/interop/families.py lists (BERT, RoBERTa, ALBERT,
ELECTRA, RoFormer, ModernBERT, DeBERTa-v2; the module keeps its first name)
and writes an orbax params folder with the tokenizer beside it, a valid
init_from, and what the folder was beyond its tensors (encoder/interop/origin.py: its
sentence-transformers pooling, model_max_length, pooler; the task heads it left out,
said on the console). Jobs can also read the HF folder directly with init_from=hf:DIR;
`encoder.interop.hf.load(folder)` returns (model config, params).
"""
import os

from encoder.interop import hf, origin
from encoder.interop.hf import check_shapes, load  # noqa: F401  (the names callers use)


def config_from_hf(hf_config: dict):
    """A HF config.json dict -> this codebase's model config (any supported family)."""
    return hf.family_of(hf_config).config_from_hf(hf_config)


def import_folder(checkpoint: str, out: str) -> int:
    """Writes the HF folder `checkpoint` as a params folder at `out` (new, empty or an
    earlier import) with its tokenizer beside it; returns the parameter count."""
    from encoder import errors
    from encoder.checkpoints import store
    from encoder.data import tokenizer as tokenizer_lib
    # --out first (before the checkpoint is read): new, empty or an earlier import
    errors.check_output(out, "import", "--out")
    if errors.inside(out, checkpoint) or errors.inside(checkpoint, out):
        raise errors.NotOurs(f"--out={out} is, contains or lies inside --checkpoint")
    cfg, params = load(checkpoint)
    tokenizer = tokenizer_lib.load(checkpoint)
    record = origin.of_hf_folder(checkpoint, params)  # what the import does not map
    line = origin.describe_dropped(checkpoint, record["dropped"])
    if line:
        print(line, flush=True)
    errors.mark_output(out, "import")
    origin.write(out, record, (params.get("pooler") or {}).get("dense"))
    config_json = os.path.join(out, "model_config.json")
    if os.path.exists(config_json):  # an earlier import: incomplete until rewritten
        os.remove(config_json)
    # The vocabulary travels with the parameters, so the folder is a valid init_from;
    # save_params writes model_config.json last (a complete folder).
    tokenizer.save(os.path.join(out, "tokenizer"))
    store.save_params(out, params, cfg)
    return sum(v.size for v in _leaves(params))

def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree
