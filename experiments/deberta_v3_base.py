"""DeBERTa-v3-base (He et al. 2023): disentangled attention (He et al. 2021) trained with
ELECTRA-style replaced token detection; 86M backbone + 98M embedding parameters (128K vocab).

Shapes are DebertaV2Model's for microsoft/deberta-v3-base: 12 layers, 768 wide, 12 heads,
3072 FFN, no token types, no absolute positions, relative positions in 256 log buckets
per direction reaching 512 (tests/interop/test_deberta.py counts both sides).

Objective: RTD, as the paper. Its generator has the discriminator's width and half its
depth (He et al. 2023's base generator, as we read the paper): generator_fraction=1,
generator_layers=6. Two simplifications: embeddings are shared as in ELECTRA (the paper's
gradient-disentangled sharing, GDES, which stops the discriminator's gradient into the
shared table and adds a residual table, is not implemented), and DeBERTa's enhanced mask
decoder (EMD, an MLM-pretraining head that HF's DebertaV2ForMaskedLM lacks too) is left
out; v3's RTD does not use it. objective=mlm gives DebertaV2ForMaskedLM's shape instead.
Optimisation follows the paper's base recipe as far as recalled (batch 8K, 500K steps);
check the learning rate and warmup against its appendix before a full run.
"""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.experiment(arg, size="base", objective="rtd", position="deberta")
    config.model.update(dict(vocab_size=128100, type_vocab_size=0, max_position=512,
                             deberta_position_buckets=256, deberta_max_relative_positions=512,
                             layer_norm_eps=1e-7))
    config.electra.update(dict(generator_fraction=1.0, generator_layers=6, disc_weight=50.0))
    config.data.seq_len = 512
    config.train.update(dict(batch_size=8192, num_steps=500_000, learning_rate=2e-4,
                             warmup_steps=10_000, b2=0.98, eps=1e-6))
    return config_lib.finalize(config, arg)
