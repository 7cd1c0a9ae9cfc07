"""A MosaicBERT-base-like encoder (Portes et al. 2023): ALiBi, GeGLU MLP, 30% masking, 137M."""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="mlm", position="alibi",
                                   activation="geglu", mask_rate=0.3)
    config.model.update(dict(vocab_size=30528, attention_dropout=0.0))
    config.train.update(dict(batch_size=4096, num_steps=70_000, learning_rate=5e-4,
                             warmup_steps=4200))
    return config_lib.finalize(config, arg)
