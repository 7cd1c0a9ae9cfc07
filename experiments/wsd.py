"""Warmup-stable-decay on the README's tiny pretraining job: a stable phase, then (decay > 0)
a decay phase; one stable run serves every budget (Hägele et al. 2024).

    # the stable run, long enough for the largest budget
    python -m encoder run --config=experiments/wsd.py:stable=960,decay=0 --workdir=runs/stable
    # the 600-step budget: a decay of 120 steps from step 480 of that run
    python -m encoder run --config=experiments/wsd.py:stable=480,decay=120 \\
        --workdir=runs/wsd_600 --config.init_from=runs/stable --config.init_step=480 \\
        --config.init_state=full

Options (besides encoder.config.OPTIONS): stable=N and decay=D steps, shape=linear|cosine|1-sqrt
(the decay's), optimizer=adamw|stable_adamw|lion, stable_masking=R and decay_masking=R (each
phase's masking rate; default the recipe's 0.15: a falling rate, as mmBERT's 30% -> 5%, is
stable_masking=0.3). The stable phase is constant after experiments/pretrain.py's warmup, so
its first N steps are the same in every run.
"""
from encoder import config as config_lib
from experiments import pretrain


def get_config(arg=None):
    options = config_lib.parse_arg(arg)
    stable = int(options.pop("stable", 960))
    decay = int(options.pop("decay", 240))
    shape = str(options.pop("shape", "linear"))
    optimizer = str(options.pop("optimizer", "adamw"))
    config = pretrain.get_config()
    # a phase's masking rate only where asked (a phase without one keeps the recipe's)
    masking = {k: dict(masking=dict(rate=float(options.pop(f"{k}_masking"))))
               if f"{k}_masking" in options else {} for k in ("stable", "decay")}
    config.train.optimizer = optimizer
    config.phases = config_lib.wsd_phases(stable, decay, shape, masking["stable"], masking["decay"])
    rest = ",".join(k if v is True else f"{k}={v}" for k, v in options.items())
    return config_lib.finalize(config, rest)
