"""ELECTRA-base (Clark et al. 2020): RTD with a 1/3-width generator, 110M discriminator."""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="rtd")
    config.model.vocab_size = 30522
    config.electra.generator_fraction = 1 / 3
    config.train.update(dict(batch_size=256, num_steps=766_000, learning_rate=2e-4,
                             warmup_steps=10_000))
    return config_lib.finalize(config, arg)
