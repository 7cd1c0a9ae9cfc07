"""Continue pretraining a released checkpoint on your own data (domain or language
adaptation): architecture, tokenizer and MLM head from the source.

    python -m encoder run --config=experiments/continue.py \\
        --config.init_from=hf:DIR|WORKDIR|PARAMS --config.data.train_files=FILES --workdir=W
    python -m encoder run --config=experiments/continue.py:recipe=modernbert_base,phase=decay \\
        --config.init_from=hf:DIR --config.data.train_files=FILES --workdir=W

Every model field is unset here and taken from the source when the job starts; a field you
set (--config.model.dropout=0.1) stays, and one that changes the function the source
computes is refused unless named in --config.init_allow (encoder/checkpoints/sources.py).
The tokenizer is the source's (copied into the workdir); the first metrics row is the
source's own held-out figure under this run's protocol. `recipe=NAME,phase=PHASE` starts
that recipe's phase (experiments/NAME.py: its schedule, length, batch, RoPE base and
masking) from the source, as one run: "continue from the stable checkpoint, decay on my
data" is `recipe=modernbert_base,phase=decay`. Options: objective (mlm | rtd, where the
source has a generator), mask_rate, steps (num_steps), seed, runlocal.
"""
import importlib.util
import os

from ml_collections.config_dict import placeholder

from encoder import config as config_lib

# what a continuation trains by default: a short constant-then-decay run at a modest rate
DEFAULT_TRAIN = dict(num_steps=1000, learning_rate=1e-4, warmup_steps=50, schedule="wsd",
                     decay_fraction=0.2, log_every=50, eval_every=250, checkpoint_every=250)


def _experiment(name: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(None)


def recipes() -> list[str]:
    """The pretraining experiments here (not this file, fine-tuning, evaluation, embedding)."""
    folder = os.path.dirname(os.path.abspath(__file__))
    names = sorted(n[:-3] for n in os.listdir(folder) if n.endswith(".py")
                   and not n.startswith("_") and n != "continue.py")
    return [n for n in names if _experiment(n).get("mode", "pretrain") == "pretrain"]


def _recipe_phase(recipe: str, phase: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{recipe}.py")
    if recipe == "continue" or not os.path.isfile(path):
        raise ValueError(f"recipe={recipe!r}: no pretraining recipe experiments/{recipe}.py; "
                         f"recipes: {', '.join(recipes())}")
    config = _experiment(recipe)
    if config.get("mode", "pretrain") != "pretrain":
        raise ValueError(f"recipe={recipe!r}: experiments/{recipe}.py is a {config.mode} "
                         f"experiment, not a pretraining recipe; recipes: {', '.join(recipes())}")
    declared = [p.get("name") for p in config_lib.declared_phases(config)]
    if not config.get("phases"):
        if phase not in ("", "main"):
            raise ValueError(f"recipe={recipe!r} has no phases; give no phase=")
        return config, {}
    if phase not in declared:
        raise ValueError(f"recipe={recipe!r}: no phase {phase!r}; its phases: "
                         f"{', '.join(declared)}")
    p = next(p for p in config_lib.declared_phases(config) if p.get("name") == phase)
    single = config_lib.phase_config(config, p)
    return single, dict(p.get("model") or {})


def get_config(arg=None):
    options = config_lib.parse_arg(arg)
    recipe, phase = options.pop("recipe", ""), str(options.pop("phase", ""))
    shrink = options.pop("runlocal", False)
    if recipe:
        config, phase_model = _recipe_phase(str(recipe), phase)
    else:
        if phase:
            raise ValueError("phase= needs recipe=NAME (experiments/NAME.py's phases)")
        config, phase_model = config_lib.base_config(), {}
        config.train.update(DEFAULT_TRAIN)
    # the source defines the model: every field unset (typed), but what the phase sets
    for k, v in config.model.items():
        if k not in phase_model and not hasattr(v, "items"):
            config.model[k] = placeholder(type(v))
    # a phase's model change (a RoPE base) differs from the source knowingly
    config.init_allow = ",".join(sorted(phase_model))
    config.data.tokenizer = ""    # the source's
    config.data.vocab_multiple = 1  # the source's rows, as they are
    config_lib.apply_options(config, options, config_lib.OPTIONS)
    if shrink:
        config.data.seq_len = min(config.data.seq_len, 64)
        config.data.tokenizer_sample_chars = 300_000
        config.train.update(dict(num_steps=20, batch_size=8, grad_accum_steps=1, warmup_steps=1,
                                 log_every=5, eval_every=20, eval_batches=2,
                                 checkpoint_every=20, batch_warmup_tokens=0, progress=False))
    return config
