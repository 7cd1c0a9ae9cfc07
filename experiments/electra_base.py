"""ELECTRA-base (Clark et al. 2020): RTD with a 1/3-width generator, 110M discriminator."""
from encoder import config as config_lib
from experiments import pop_attention_dropout


def get_config(arg=None):
    # attention_dropout=0: the kernels serve every layer (the paper's 0.1 runs dense)
    arg, attention_dropout = pop_attention_dropout(arg, 0.1)
    config = config_lib.experiment(arg, size="base", objective="rtd")
    config.model.vocab_size = 30522
    config.electra.generator_fraction = 1 / 3
    config.train.update(dict(batch_size=256, num_steps=766_000, learning_rate=2e-4,
                             warmup_steps=10_000))
    config.model.attention_dropout = attention_dropout
    return config_lib.finalize(config, arg)
