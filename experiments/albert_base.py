"""ALBERT-base (Lan et al. 2020): E=128 factorized embeddings, all layers shared, SOP, 12M."""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="mlm", pooling="cls_tanh")
    config.model.update(dict(vocab_size=30000, embedding_size=128, share_layers=True,
                             dropout=0.0, attention_dropout=0.0))
    config.pair_task = "sop"
    config.data.pack_mode = "pairs"
    config.masking.mode = "span"  # ALBERT's n-gram masking, approximated by word spans
    config.train.update(dict(batch_size=4096, num_steps=125_000, learning_rate=1.76e-3,
                             warmup_steps=3125))
    return config_lib.finalize(config, arg)
