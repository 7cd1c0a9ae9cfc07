"""ELECTRA-small (Clark et al. 2020): RTD, E=128 factorized embeddings, D=256, 14M."""
from encoder import config as config_lib
from experiments import pop_attention_dropout


def get_config(arg=None):
    # attention_dropout=0: the kernels serve every layer (the paper's 0.1 runs dense)
    arg, attention_dropout = pop_attention_dropout(arg, 0.1)
    config = config_lib.experiment(arg, size="base", objective="rtd")
    config.model.update(dict(vocab_size=30522, hidden_size=256, num_heads=4,
                             intermediate_size=1024, embedding_size=128))
    config.electra.generator_fraction = 0.25
    config.train.update(dict(batch_size=128, num_steps=1_000_000, learning_rate=5e-4,
                             warmup_steps=10_000))
    config.model.attention_dropout = attention_dropout
    return config_lib.finalize(config, arg)
