"""The analytic FLOPs function against hand-computed BERT-base figures."""
from encoder import config as config_lib
from encoder.train import flops


def test_bert_base_flops_by_hand():
    cfg = config_lib.model_config("base")
    cfg.vocab_size = 30522
    # per layer and token: 8 d^2 + 4 T d + 4 d f with d=768, f=3072, T=128
    per_layer = 8 * 768**2 + 4 * 128 * 768 + 4 * 768 * 3072
    assert per_layer == 14_548_992
    assert flops.encoder_flops_per_token(cfg, 128) == 12 * per_layer
    assert flops.mlm_head_flops(cfg) == 2 * (768 * 768 + 768 * 30522)
    config = config_lib.base_config()
    config.model = cfg
    step = flops.train_flops_per_step(config, batch_size=32, seq_len=128, predictions_per_row=20)
    assert step == 3 * (32 * 128 * 12 * per_layer + 32 * 20 * 2 * (768 * 768 + 768 * 30522))


def test_gated_mlp_and_factorized_embeddings_count_extra_work():
    cfg = config_lib.model_config("tiny")
    plain = flops.encoder_flops_per_token(cfg, 64)
    cfg.activation = "geglu"
    d, f = cfg.hidden_size, cfg.intermediate_size
    assert flops.encoder_flops_per_token(cfg, 64) - plain == cfg.num_layers * 2 * d * f
    cfg.embedding_size = 32
    assert flops.encoder_flops_per_token(cfg, 64) - plain == cfg.num_layers * 2 * d * f + 2 * 32 * d


def test_rtd_step_includes_the_generator():
    config = config_lib.base_config()
    mlm = flops.config_train_flops_per_step(config)
    config.objective = "rtd"
    assert flops.config_train_flops_per_step(config) > mlm
