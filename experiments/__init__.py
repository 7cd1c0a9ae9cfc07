"""Experiment recipes: one file per family, each with get_config(arg)."""


def pop_attention_dropout(arg: str | None, default: float) -> tuple[str, float]:
    """Splits `attention_dropout=X` off an experiment arg: (the rest of the arg, X).

    The recipe-level variant for families whose papers used attention dropout 0.1 while
    later practice (MosaicBERT, ModernBERT) trains without it: at 0 every attention kernel
    (splash, cuDNN, Triton) serves the layers; at 0.1 each layer runs the dense einsum path.
    """
    keep, value = [], default
    for item in filter(None, (s.strip() for s in (arg or "").split(","))):
        key, _, raw = item.partition("=")
        if key.strip() == "attention_dropout":
            value = float(raw)
        else:
            keep.append(item)
    return ",".join(keep), value
