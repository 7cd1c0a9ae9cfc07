"""Which parameters train: everything (full), only the head (frozen: a linear probe on a
frozen encoder, Alain & Bengio 2016), or the head and the LoRA adapters (lora)."""
import jax

MODES = ("full", "frozen", "lora")


def trainable_labels(params, mode: str):
    """'train' or 'freeze' per leaf of a {'model': ..., 'lora'?: ...} tree."""
    def label(path, _):
        keys = tuple(getattr(p, "key", str(p)) for p in path)
        if mode == "full" or keys[0] == "lora" or (len(keys) > 1 and keys[1] == "head"):
            return "train"
        return "freeze"
    return jax.tree_util.tree_map_with_path(label, params)
