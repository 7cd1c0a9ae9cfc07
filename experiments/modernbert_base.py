"""ModernBERT-base (Warner et al. 2024): pre-LN, RoPE, GeGLU, no biases, alternating
local (128-token window, RoPE base 1e4) / global (every 3rd layer, RoPE base 1.6e5)
attention, no attention norm on layer 0, bias-free MLM transform, 30% masking.
Its parameters are exactly HF ModernBertForMaskedLM(ModernBertConfig())'s
(tests/interop/test_modernbert.py): 149,655,232."""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="mlm", position="rope",
                                   norm="pre_ln", activation="geglu", mask_rate=0.3,
                                   pooling="mean")
    config.model.update(dict(vocab_size=50368, num_layers=22, intermediate_size=1152,
                             use_bias=False, type_vocab_size=0, local_window=128,
                             global_every=3, rope_theta=160000.0, local_rope_theta=10000.0,
                             first_attention_norm=False, mlm_transform_bias=False,
                             layer_norm_eps=1e-5,
                             max_position=8192, dropout=0.0, attention_dropout=0.0))
    config.data.seq_len = 1024
    config.data.restart_positions = True
    config.train.update(dict(batch_size=4608, num_steps=400_000, learning_rate=8e-4,
                             warmup_steps=3000, weight_decay=1e-5))
    return config_lib.finalize(config, arg)
