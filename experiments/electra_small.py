"""ELECTRA-small (Clark et al. 2020): RTD, E=128 factorized embeddings, D=256, 14M."""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="rtd")
    config.model.update(dict(vocab_size=30522, hidden_size=256, num_heads=4,
                             intermediate_size=1024, embedding_size=128))
    config.electra.generator_fraction = 0.25
    config.train.update(dict(batch_size=128, num_steps=1_000_000, learning_rate=5e-4,
                             warmup_steps=10_000))
    return config_lib.finalize(config, arg)
