"""BERT-base (Devlin et al. 2019): post-LN, learned positions, GELU, MLM + NSP, 110M."""
from encoder import config as config_lib
from experiments import pop_attention_dropout


def get_config(arg=None):
    # attention_dropout=0: the kernels serve every layer (the paper's 0.1 runs dense)
    arg, attention_dropout = pop_attention_dropout(arg, 0.1)
    config = config_lib.experiment(arg, size="base", objective="mlm", position="learned",
                                   pooling="cls_tanh")
    config.model.vocab_size = 30522
    config.pair_task = "nsp"
    config.data.pack_mode = "pairs"
    config.data.seq_len = 128
    config.train.update(dict(batch_size=256, num_steps=1_000_000, learning_rate=1e-4,
                             warmup_steps=10_000, b2=0.999, eps=1e-6))
    config.model.attention_dropout = attention_dropout
    return config_lib.finalize(config, arg)
