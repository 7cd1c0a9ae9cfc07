"""The contrastive task's options (config.contrastive), read where a retriever is trained
(encoder/tasks/contrastive.py) and where a trained one is used (retriever.py: the suite,
mining, benchmarks): prefixes, Matryoshka dims and the head travel with the run."""
import dataclasses

SCALE = 20.0  # inverse temperature on cosine similarities (Sentence-BERT's MNRL)


@dataclasses.dataclass(frozen=True)
class Options:
    temperature: float = 1.0 / SCALE
    learn_temperature: bool = False
    symmetric: bool = False
    query_prefix: str = ""
    passage_prefix: str = ""
    matryoshka_dims: tuple = ()
    cache_chunk: int = 0
    num_negatives: int = 0
    head: str = "dense"
    colbert_dim: int = 0
    mask_duplicates: bool = True
    # distillation from a teacher's scores (encoder/retrieval/distill.py)
    loss: str = "in_batch"
    in_batch_weight: float = 0.0
    distill_temperature: float = 1.0
    distill_normalize: str = "none"
    # SPLADE (head=sparse; encoder/retrieval/sparse.py)
    sparse_query: str = "expand"
    sparse_regularizer: str = "flops"
    flops_query_weight: float = 3e-4
    flops_doc_weight: float = 1e-4
    flops_warmup_steps: int = 0
    sparse_top_terms: int = 0


HEADS = ("dense", "colbert", "sparse")
QUERY_SIDES = ("expand", "terms")      # sparse.py: full expansion, or the query's own ids
REGULARIZERS = ("flops", "l1")
# in_batch: the ranking loss over every passage of the batch (labels only); margin_mse and
# kl read each row's teacher scores (distill.LOSSES), plus in_batch_weight x in_batch
LOSSES = ("in_batch", "margin_mse", "kl")
NORMALIZE = ("none", "minmax")


def options(config) -> Options:
    """The task's options from config.contrastive (absent: the defaults), checked."""
    block = getattr(config, "contrastive", None) if config is not None else None
    if block is None:
        return Options()
    raw = dict(block.items()) if hasattr(block, "items") else dict(vars(block))
    dims = raw.get("matryoshka_dims", ())
    if isinstance(dims, str):
        dims = tuple(int(x) for x in dims.replace(" ", "").split(",") if x)
    raw["matryoshka_dims"] = tuple(int(d) for d in dims)
    known = {f.name for f in dataclasses.fields(Options)}
    for name in ("in_batch_weight", "distill_temperature", "flops_query_weight",
                 "flops_doc_weight"):  # an int override is a number
        if isinstance(raw.get(name), int) and not isinstance(raw.get(name), bool):
            raw[name] = float(raw[name])
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"contrastive: unknown fields {unknown}; valid: {sorted(known)}")
    opts = Options(**raw)
    if opts.head not in HEADS:
        raise ValueError(f"contrastive.head must be one of {HEADS}, got {opts.head!r}")
    if opts.head == "colbert" and opts.colbert_dim <= 0:
        raise ValueError("contrastive.head=colbert needs contrastive.colbert_dim > 0")
    if opts.loss not in LOSSES:
        raise ValueError(f"contrastive.loss must be one of {LOSSES}, got {opts.loss!r}")
    if opts.distill_normalize not in NORMALIZE:
        raise ValueError(f"contrastive.distill_normalize must be one of {NORMALIZE}, got "
                         f"{opts.distill_normalize!r}")
    if opts.distill_temperature <= 0:
        raise ValueError("contrastive.distill_temperature must be positive, got "
                         f"{opts.distill_temperature}")
    if opts.sparse_query not in QUERY_SIDES:
        raise ValueError(f"contrastive.sparse_query must be one of {QUERY_SIDES}, got "
                         f"{opts.sparse_query!r}")
    if opts.sparse_regularizer not in REGULARIZERS:
        raise ValueError(f"contrastive.sparse_regularizer must be one of {REGULARIZERS}, got "
                         f"{opts.sparse_regularizer!r}")
    for name in ("flops_query_weight", "flops_doc_weight", "flops_warmup_steps",
                 "sparse_top_terms"):
        if getattr(opts, name) < 0:
            raise ValueError(f"contrastive.{name} must be >= 0, got {getattr(opts, name)}")
    if opts.in_batch_weight < 0:
        raise ValueError(f"contrastive.in_batch_weight must be >= 0, got {opts.in_batch_weight}")
    if opts.temperature <= 0:
        raise ValueError(f"contrastive.temperature must be positive, got {opts.temperature}")
    for name in ("cache_chunk", "num_negatives"):
        if getattr(opts, name) < 0:
            raise ValueError(f"contrastive.{name} must be >= 0, got {getattr(opts, name)}")
    return opts


def of_run(run_config) -> Options:
    """A source run's options (its config's contrastive block; none: the defaults)."""
    block = None
    if run_config is not None and "contrastive" in run_config:
        block = run_config["contrastive"]
    return options(type("Run", (), {"contrastive": block})())
