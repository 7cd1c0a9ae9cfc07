"""The pretraining configuration as plain data: base config, size presets, experiment options.

One base config holds every default; experiment modules under experiments/
state only what differs. This module imports no model, objective or training
code: each variant name is a string checked where its table lives
(`encoder.model.models.validate_config`, `encoder.objectives.objectives.validate`,
`encoder.jobs.pretrain.validate`), before anything compiles, with the valid
names listed. The fine-tuning schema is encoder/finetune/config.py; both use
the same experiment-argument syntax (`parse_arg`, `apply_options`).
"""
import math

import ml_collections

from encoder import registry

# name: (num_layers, hidden_size, num_heads, intermediate_size)
# tiny/mini/small/medium follow Turc et al. 2019's compact BERTs.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}


def model_config(size: str = "tiny") -> ml_collections.ConfigDict:
    """Model defaults (BERT's choices) at a named size."""
    layers, width, heads, ffn = registry.lookup(SIZES, size, "model size")
    return ml_collections.ConfigDict(dict(
        size=size,
        vocab_size=32768,
        real_vocab_size=0,         # 0: every row is a token; N < vocab_size: rows N.. pad the
                                   # vocabulary (tokenizer.padded_vocab_size), masked out of
                                   # the MLM softmax and never sampled
        hidden_size=width,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=ffn,
        embedding_size=0,          # 0: same as hidden_size; E < D factorizes (ALBERT)
        type_vocab_size=2,
        max_position=512,
        position="learned",        # encoder.model.positions.POSITIONS
        rope_theta=10000.0,
        t5_num_buckets=32,
        t5_max_distance=128,
        deberta_position_buckets=256,   # deberta: log buckets per direction (HF position_buckets);
                                        # 0: none, offsets clipped at ±max_relative_positions
        deberta_max_relative_positions=512,  # deberta: offset the log buckets reach (HF
                                             # max_relative_positions; v3: 512)
        norm="post_ln",            # encoder.model.layers.NORM_PLACEMENTS
        activation="gelu",         # encoder.model.layers.ACTIVATIONS
        head_activation="gelu",
        use_bias=True,
        layer_norm_eps=1e-12,
        dropout=0.1,
        attention_dropout=0.1,
        local_window=0,            # 0: global attention everywhere
        global_every=1,            # with a window: layers 0, k, 2k... stay global; 0: none
        local_rope_theta=0.0,      # RoPE theta of local-window layers; 0: rope_theta
                                   # (ModernBERT: 1e4 local, 1.6e5 global)
        first_attention_norm=True, # pre_ln only; False: layer 0's attention reads the normed
                                   # embeddings directly, no second norm (ModernBERT)
        share_layers=False,        # ALBERT cross-layer sharing
        tie_embeddings=True,
        mlm_transform_bias=True,   # the MLM transform (dense) has a bias: BERT yes, ModernBERT no
        initializer_range=0.02,
        dtype="float32",           # compute dtype; parameters stay float32
        attention_impl="auto",     # encoder.model.attention_backends.IMPLEMENTATIONS
        remat="none",              # encoder.model.encoder.REMAT_POLICIES
        scan_layers="auto",        # auto | true | false: nn.scan over the layers (auto: from
                                   # 12 layers; encoder/model/scan.py)
    ))


def base_config() -> ml_collections.ConfigDict:
    """Every field an experiment can override, with its default."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.objective = "mlm"           # encoder.objectives.objectives.OBJECTIVES
    config.pooling = "cls"             # encoder.model.heads.POOLING
    config.init_from = ""              # a workdir of this codebase, or hf:DIR
    config.init_step = -1              # init_from a workdir: its checkpoint at this step (-1: newest)
    config.init_state = "params"       # params: its parameters, a fresh optimizer at step 0 |
                                       # full: its parameters, optimizer state (EMA included), step
                                       # and data position: the run continues it (a decay from
                                       # step N; a context extension) (encoder/train/phases.py)
    config.init_fresh = ""             # init_from: path prefixes (encoder/blocks_0,mlm_head) that
                                       # start fresh (the source's tensors there are not loaded)
                                       # or may go unused; anything else unmatched between
                                       # source and model is refused, and so is a prefix
                                       # matching nothing
    config.init_allow = ""             # init_from: model fields (norm,position) that may differ
                                       # from the source's (each computes another function)
    config.phases = ()                 # () one phase; else a tuple of dicts (encoder/train/phases.py)
    config.evals = ml_collections.ConfigDict()  # name -> dict(kind=..., every=..., options):
                                       # evaluators at their own cadence (encoder/jobs/evals.py)
    config.model = model_config("tiny")

    config.masking = ml_collections.ConfigDict(dict(
        mode="token",                  # encoder.objectives.masking.MASKING_MODES
        rate=0.15,
        mask_prob=0.8,                 # of the selected: [MASK]
        random_prob=0.1,               # of the selected: a random token
        span_p=0.2,                    # span mode: a word starts a new span with this probability
    ))
    config.pair_task = "none"          # none | nsp | sop (auxiliary sentence-pair loss)

    config.electra = ml_collections.ConfigDict(dict(
        generator_fraction=0.25,       # generator width / discriminator width
        generator_layers=0,            # 0: same depth as the discriminator
        disc_weight=50.0,              # λ in L = L_gen + λ L_disc
        temperature=1.0,               # Gumbel sampling temperature
    ))

    config.data = ml_collections.ConfigDict(dict(
        train_files="",                # a prepared folder (`encoder prepare`), or comma-separated
                                       # text paths/globs (prepared into cache_dir); empty: stdlib
        valid_files="",                # the same kinds; empty: the train corpus's hash split
        format="",                     # text | jsonl | parquet | arrow | mds | tokens; empty: each
                                       # file's own (encoder/data/formats.py detects it)
        text_field="text",             # the JSONL field / Parquet, Arrow or MDS column read
        max_skipped_share=0.01,        # the run refuses input more of which was skipped or
                                       # damaged (binary files, long lines, bad records, U+FFFD)
        max_held_out_overlap=0.01,     # the run refuses held-out documents more of which are
                                       # training documents (by content: encoder/data/overlap.py)
        sources={},                    # a mixture instead of train_files: name -> dict(files=,
                                       # format=, text_field=, weight=) (encoder/data/mixture.py)
        temperature=0.0,               # a mixture's shares: 0 the weights as given; tau in (0, 1]:
                                       # weight x tokens^tau (XLM-R, mmBERT; smaller: flatter)
        on_exhausted="repeat",         # a mixture's source that runs dry: repeat (a new epoch,
                                       # counted) | end (its phase ends)
        one_doc_per_line=False,
        seq_len=128,
        pack_mode="documents",         # documents | pairs (NSP/SOP rows)
        restart_positions=False,       # positions restart at every packed document
        document_mask=True,            # tokens attend only inside their document
        tokenizer="",                  # path to a .model; empty: train one into the workdir
        tokenizer_type="unigram",      # unigram | bpe | byte_bpe (data/tokenizer.py TOKENIZER_TYPES)
        vocab_multiple=64,             # the model's vocabulary rows: the tokenizer's, padded to a
                                       # multiple of this (masked out of the MLM softmax; 1: none)
        tokenizer_sample_chars=4_000_000,
        cache_dir="",                  # prepared plain text goes here; empty: WORKDIR/cache
        valid_fraction=0.05,           # embedded corpus: held-out share of documents
        max_line_chars=100_000,
    ))

    config.train = ml_collections.ConfigDict(dict(
        num_steps=1000,
        batch_size=32,
        grad_accum_steps=1,
        learning_rate=5e-4,
        warmup_steps=100,
        schedule="linear",             # encoder.train.schedules.SCHEDULES
        end_learning_rate_fraction=0.0,
        decay_shape="linear",          # wsd: encoder.train.schedules.DECAY_SHAPES
        decay_steps=0,                 # wsd: the decay's length; 0: decay_fraction of the steps
        decay_fraction=0.2,
        optimizer="adamw",             # encoder.train.optimizer.OPTIMIZERS
        decoupled_weight_decay=False,  # True: p -= wd * lr_t / lr_peak * p (ModernBERT's 1e-5)
        ema_decay=0.0,                 # > 0: keep an EMA of the parameters (evaluated as eval_ema/)
        batch_warmup_tokens=0,         # > 0: the batch grows from batch_warmup_start rows to
        batch_warmup_start=0,          # batch_size over this many tokens, in steps of
        batch_warmup_increment=0,      # batch_warmup_increment rows (0: one micro-batch)
        time_budget_s=0.0,             # > 0: cramming's wall-clock budget: the schedule is read
                                       # at the budget's share spent (x num_steps), and the
                                       # run stops when it is spent (encoder/train/optimizer.py)
        b1=0.9,
        b2=0.98,
        eps=1e-6,
        weight_decay=0.01,
        clip_norm=1.0,
        log_every=50,
        eval_every=500,
        eval_batches=20,
        checkpoint_every=500,
        keep_checkpoints=3,
        progress=True,
        peak_flops=0.0,                # 0: measured (CPU) or datasheet (GPU)
        debug_nan_at_step=-1,          # testing hook: force a non-finite loss at this step
    ))

    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1))
    config.distributed = ml_collections.ConfigDict(dict(
        coordinator_address="", num_processes=0, process_id=-1))
    return config


def max_predictions(seq_len: int, rate: float) -> int:
    """Static number of MLM prediction slots per row.

    A row masks floor(rate * n + u) <= ceil(rate * n) <= ceil(rate * T) tokens
    (n candidates <= T, u < 1), so ceil(rate * T) slots always suffice.
    """
    return max(1, math.ceil(seq_len * rate))


def coerce(value: str):
    """'3' -> 3, '1e-3' -> 0.001, 'true' -> True, anything else stays a string."""
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


def parse_arg(arg: str | None) -> dict:
    """'size=tiny,objective=rtd,runlocal' -> {'size': 'tiny', 'objective': 'rtd', 'runlocal': True}."""
    options = {}
    for item in filter(None, (s.strip() for s in (arg or "").split(","))):
        key, sep, value = item.partition("=")
        options[key.strip()] = coerce(value.strip()) if sep else True
    return options


SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "intermediate_size")


def _set_objective(c, v):
    """objective=rtd also takes ELECTRA's corruption of the generator's input: 85% of the
    selected tokens become [MASK], 15% stay, none is random (the released code's
    pretrain_helpers.mask; BERT's 80/10/10 is the MLM default)."""
    c.objective = v
    if v == "rtd":
        c.masking.update(mask_prob=0.85, random_prob=0.0)


def _set_size(c, v):
    """Sets only the shape fields of a size preset; every variant choice stays."""
    c.model.update(dict(zip(SHAPE_FIELDS, registry.lookup(SIZES, v, "model size"))), size=v)


# Options an experiment argument may set: name -> how it changes the config.
OPTIONS = {
    "size": _set_size,
    "objective": lambda c, v: _set_objective(c, v),
    "position": lambda c, v: setattr(c.model, "position", v),
    "pooling": lambda c, v: setattr(c, "pooling", v),
    "norm": lambda c, v: setattr(c.model, "norm", v),
    "activation": lambda c, v: setattr(c.model, "activation", v),
    "masking": lambda c, v: setattr(c.masking, "mode", v),
    "mask_rate": lambda c, v: setattr(c.masking, "rate", float(v)),
    "seed": lambda c, v: setattr(c, "seed", int(v)),
    "steps": lambda c, v: setattr(c.train, "num_steps", int(v)),
    "runlocal": lambda c, v: runlocal(c) if v else None,
}


RUNLOCAL_PHASE_STEPS = 5


def _runlocal_phase(p: dict, seq_len: int) -> dict:
    """A phase at runlocal size: RUNLOCAL_PHASE_STEPS steps; its seq_len scaled as the base's
    (to 64) but at most 512; about 512 tokens a step; a batch-size warmup over 3 steps'
    worth of 2-row micro-batches; what it changes (lr, RoPE base, masking, data) kept."""
    p = {k: (dict(v) if isinstance(v, dict) else v) for k, v in p.items()}
    p.pop("tokens", None)
    p["steps"] = RUNLOCAL_PHASE_STEPS
    data, train = p.get("data", {}), p.get("train", {})
    seq = 64
    if "seq_len" in data:
        seq = data["seq_len"] = min(512, max(64, 64 * int(data["seq_len"]) // max(seq_len, 1)))
    if "batch_size" in train or "grad_accum_steps" in train:
        train["batch_size"], train["grad_accum_steps"] = max(2, 512 // seq), 1
    if train.get("batch_warmup_tokens"):
        train.update(batch_size=8, grad_accum_steps=4, batch_warmup_start=2,
                     batch_warmup_increment=2, batch_warmup_tokens=2 * 3 * 64 * 2)
    if "warmup_steps" in train:
        train["warmup_steps"] = min(int(train["warmup_steps"]), 2)
    train.pop("decay_steps", None)
    if train:
        p["train"] = train
    if data:
        p["data"] = data
    return p


def runlocal(c: ml_collections.ConfigDict) -> None:
    """Shrinks any experiment so it runs in seconds on a laptop CPU (and in tests); a run
    in phases keeps every phase, each a few steps long."""
    if c.get("phases"):
        c.phases = tuple(_runlocal_phase(dict(p), c.data.seq_len) for p in c.phases)
    _set_size(c, "tiny")
    if c.model.embedding_size:
        c.model.embedding_size = min(c.model.embedding_size, 64)
    c.model.vocab_size = 1000
    c.model.max_position = 512
    if c.model.local_window:
        c.model.local_window = 16
    c.data.seq_len = 64
    c.data.tokenizer_sample_chars = 300_000
    c.train.update(dict(num_steps=20, batch_size=8, warmup_steps=1, log_every=5, eval_every=20,
                        eval_batches=2, checkpoint_every=20, progress=False))
    # the declared task evaluators would take longer than the run (evals=TASKS adds them)
    c.evals = ml_collections.ConfigDict({k: v for k, v in c.get("evals", {}).items()
                                         if "task" not in v})
    if c.get("phases"):
        c.train.update(dict(warmup_steps=2, grad_accum_steps=1, batch_warmup_tokens=0,
                            eval_every=RUNLOCAL_PHASE_STEPS,
                            checkpoint_every=RUNLOCAL_PHASE_STEPS))


def apply_options(config, options: dict, table: dict, kind: str = "experiment option"):
    """Applies parsed key=value options through a table of setters (unknown keys list the valid)."""
    for key, value in options.items():
        registry.lookup(table, key, kind)(config, value)
    return config


def experiment(arg: str | None = None, **defaults) -> ml_collections.ConfigDict:
    """base_config with an experiment's defaults (OPTIONS names) applied.

    An experiment file then sets its other fields and ends with
    finalize(config, arg), so the command-line arg always wins.
    """
    del arg  # applied by finalize
    return apply_options(base_config(), defaults, OPTIONS)


KEPT_BY_RUNLOCAL = ("steps",)  # options an explicit value of keeps over runlocal's


def finalize(config: ml_collections.ConfigDict, arg: str | None,
             after_runlocal: dict | None = None) -> ml_collections.ConfigDict:
    """Applies the experiment arg (key=value,...) last; `runlocal` shrinks after everything
    but the experiment's own options in after_runlocal ({name: setter(config, value)}:
    what was asked for stays asked for at runlocal size, e.g. pretrain.py's evals=)."""
    options = parse_arg(arg)
    shrink = options.pop("runlocal", False)
    after = {k: options.pop(k) for k in list(options) if k in (after_runlocal or {})}
    apply_options(config, options, OPTIONS)
    if shrink:
        runlocal(config)
        # an explicit step count is the user's, not runlocal's (steps=5,runlocal: 5 steps)
        apply_options(config, {k: v for k, v in options.items() if k in KEPT_BY_RUNLOCAL},
                      OPTIONS)
    return apply_options(config, after, after_runlocal or {})


# ------------------------------------------------------------ phases, as plain data
# What a recipe states about its phases (encoder/train/phases.py plans them into steps):
# here so that an experiment file needs nothing but this module.

# section -> the fields a phase may set (each keeps the parameters' shapes)
PHASE_FIELDS = {
    "train": ("learning_rate", "warmup_steps", "schedule", "end_learning_rate_fraction",
              "decay_shape", "decay_steps", "decay_fraction", "batch_size", "grad_accum_steps",
              "batch_warmup_tokens", "batch_warmup_start", "batch_warmup_increment"),
    "data": ("seq_len", "train_files", "valid_files", "one_doc_per_line", "valid_fraction",
             "sources", "temperature", "on_exhausted"),
    "model": ("rope_theta", "local_rope_theta", "attention_impl", "remat"),
    "masking": ("rate", "mask_prob", "random_prob", "span_p", "mode"),
}


def wsd_phases(stable: int, decay: int, shape: str = "linear", stable_extra: dict | None = None,
               decay_extra: dict | None = None) -> tuple:
    """Warmup-stable-decay as phases: `stable` steps at the constant peak (after the
    recipe's warmup), then (decay > 0) `decay` steps down along `shape`. One stable run's
    checkpoint at step S starts the decay of every budget S + D (experiments/wsd.py,
    `encoder ablate --wsd_budgets`). *_extra: more of a phase's fields (its masking, say)."""
    out = (dict(name="stable", steps=int(stable), train=dict(schedule="constant"),
                **(stable_extra or {})),)
    if decay:
        out += (dict(name="decay", steps=int(decay), train=dict(
            schedule="wsd", warmup_steps=0, decay_fraction=1.0, decay_shape=shape),
            **(decay_extra or {})),)
    return out


def declared_phases(config) -> list[dict]:
    """The phases as plain dicts (a config read back from JSON holds lists of dicts)."""
    out = []
    for i, p in enumerate(config.get("phases", ()) or ()):
        if hasattr(p, "to_dict"):
            p = p.to_dict()
        if not isinstance(p, dict):
            raise ValueError(f"phases[{i}]: expected a dict such as dict(name='decay', "
                             f"steps=100, train=dict(learning_rate=1e-4)), got {p!r}")
        out.append(dict(p))
    return out


def is_number(v) -> bool:
    """An int or a float, not a bool (True is an int to Python, never a count here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def mixture_source(files: str = "", weight: float = 1.0, format: str = "",
                   text_field: str = "") -> dict:
    """One source of a mixture (data.sources.NAME, encoder/data/mixture.py) with all its
    fields, so that each can be set from the command line (--config.data.sources.NAME.files
    =...); files "" reads the embedded corpus, as data.train_files="" does."""
    return dict(files=files, format=format, text_field=text_field, weight=float(weight))


def merge_sources(base, over, where: str = "") -> dict:
    """A phase's data.sources laid over the base's (encoder/data/mixture.py): a named
    source's fields replace those fields of the base's source (dict(web=dict(weight=0.5))
    changes only web's weight), a new name adds a source."""
    def plain(d):
        return d.to_dict() if hasattr(d, "to_dict") else dict(d or {})
    if not isinstance(over, dict) and not hasattr(over, "to_dict"):
        raise ValueError(f"{where}: data.sources must map a source's name to a dict of its "
                         f"fields, got {over!r}")
    out = {k: plain(v) if isinstance(v, dict) or hasattr(v, "to_dict") else v
           for k, v in plain(base).items()}
    for name, fields in plain(over).items():
        if not isinstance(fields, dict) and not hasattr(fields, "to_dict"):
            raise ValueError(f"{where}: data.sources.{name} must be a dict of its fields "
                             f"(files, format, text_field, weight), got {fields!r}")
        if name not in out and "files" not in plain(fields):
            # a new name with no files would read the embedded corpus: most often a typo
            raise ValueError(f"{where}: data.sources.{name} is not among the declared "
                             f"sources ({', '.join(sorted(out)) or 'none'}) and gives no "
                             "files: to add a source, give its files (files='' for the "
                             "embedded corpus)")
        out[name] = {**(out.get(name) or {}), **plain(fields)}
    return out


def phase_config(config, p: dict):
    """The base config with phase p's fields laid over it (phases emptied). A value is
    checked against the field's type: an integer field takes a whole number (2.5 rows is
    refused, not rounded), a float field a number, anything else the field's own type."""
    c = config.copy_and_resolve_references()
    c.phases = ()
    where = f"phase {p.get('name', '?')!r}"
    for section in PHASE_FIELDS:
        for k, v in (p.get(section) or {}).items():
            if (section, k) == ("data", "sources"):  # laid over the base's, source by source
                c.data.sources = merge_sources(c.data.get("sources"), v, where)
                continue
            old = c[section][k]
            if isinstance(old, bool) or not isinstance(old, (int, float)):
                try:
                    c[section][k] = v
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{where}: {section}.{k}={v!r}: {e}") from None
                continue
            if not is_number(v) or (isinstance(old, int) and v != int(v)):
                kind = "a whole number" if isinstance(old, int) else "a number"
                raise ValueError(f"{where}: {section}.{k}={v!r} must be {kind} (the field's "
                                 f"default is {old!r})")
            c[section][k] = type(old)(v)
    return c
