"""RoBERTa-base (Liu et al. 2019): BERT's architecture, dynamic masking, full-sentence
packing, no NSP, 50K byte-level vocabulary, 125M parameters."""
from encoder import config as config_lib
from experiments import pop_attention_dropout


def get_config(arg=None):
    # attention_dropout=0: the kernels serve every layer (the paper's 0.1 runs dense)
    arg, attention_dropout = pop_attention_dropout(arg, 0.1)
    config = config_lib.experiment(arg, size="base", objective="mlm", position="learned")
    config.model.vocab_size = 50265
    config.model.max_position = 514
    config.model.type_vocab_size = 1
    config.model.layer_norm_eps = 1e-5
    config.data.seq_len = 512
    config.data.tokenizer_type = "bpe"
    config.train.update(dict(batch_size=8192, num_steps=500_000, learning_rate=6e-4,
                             warmup_steps=24_000, b2=0.98, eps=1e-6))
    config.model.attention_dropout = attention_dropout
    return config_lib.finalize(config, arg)
