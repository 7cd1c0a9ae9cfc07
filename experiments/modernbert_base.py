"""ModernBERT-base (Warner et al. 2024): pre-LN, RoPE, GeGLU, no biases, alternating
local (128-token window, RoPE base 1e4) / global (every 3rd layer, RoPE base 1.6e5)
attention, no attention norm on layer 0, bias-free MLM transform, 30% masking.
Its parameters are exactly HF ModernBertForMaskedLM(ModernBertConfig())'s
(tests/interop/test_modernbert.py): 149,655,232.

Training as published (Warner et al. 2024 §2.2): StableAdamW (lr 8e-4, betas 0.9/0.98,
eps 1e-6, fully decoupled weight decay 1e-5, its update clipping in place of gradient
clipping), a trapezoidal schedule in three phases (PHASES): 1.72T tokens at 1,024 with a
RoPE base of 1e4 and a batch-size warmup from 768 to 4,608 rows over 50B tokens; a
context extension to 8,192 tokens with the global RoPE base at 1.6e5, 250B tokens at a
constant 3e-4; a 50B-token 1-sqrt decay. The model fields are the released model's (the
last phase's). `runlocal` keeps all three phases, a few steps each.

Data (§2.2.1): a mixture of web documents, code and scientific literature (SOURCES, one
source a role). The paper gives no shares, so each role is drawn in proportion to its
tokens (data.temperature 1: the mixture as the data has it); the extension reads the same
mixture at 8,192 tokens; the decay upsamples higher-quality sources following ProLong
(Gao et al. 2024): the `quality` role (books, textbooks, encyclopedic text), declared from
the start at weight 0 so the run's tokenizer sees it, drawn in the decay at twice its
size's share (DECAY_DATA; the factor is this recipe's, the paper states none). Each role's
files: --config.data.sources.ROLE.files=PATH (with .format= and .text_field= where the
extension does not say); a role without files reads the embedded corpus, as runlocal does."""
from encoder import config as config_lib

SOURCES = dict(web=config_lib.mixture_source(), code=config_lib.mixture_source(),
               science=config_lib.mixture_source(),
               quality=config_lib.mixture_source(weight=0.0))
DECAY_DATA = dict(sources=dict(quality=dict(weight=2.0)))

# The extension's batch keeps the stable phase's ~4.7M tokens a step (576 x 8,192 rows);
# the 3B-token lr warmup is ~3,000 steps at the warming-up batch sizes.
PHASES = (
    dict(name="stable", tokens=1_720_000_000_000, model=dict(rope_theta=10000.0),
         train=dict(schedule="constant", grad_accum_steps=6, batch_warmup_tokens=50_000_000_000,
                    batch_warmup_start=768, batch_warmup_increment=768)),
    dict(name="extension", tokens=250_000_000_000, data=dict(seq_len=8192),
         train=dict(learning_rate=3e-4, schedule="constant", warmup_steps=0, batch_size=576)),
    dict(name="decay", tokens=50_000_000_000, data=dict(seq_len=8192, **DECAY_DATA),
         train=dict(learning_rate=3e-4, schedule="wsd", warmup_steps=0, decay_fraction=1.0,
                    decay_shape="1-sqrt", batch_size=576)),
)


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
    config.data.update(sources=SOURCES, temperature=1.0)
    config.train.update(dict(batch_size=4608, num_steps=400_000, learning_rate=8e-4,
                             warmup_steps=3000, weight_decay=1e-5))
    config.train.update(dict(optimizer="stable_adamw", decoupled_weight_decay=True,
                             clip_norm=0.0))
    config.phases = PHASES
    return config_lib.finalize(config, arg)
