"""Pretraining a tiny encoder on the embedded standard-library corpus (the README's main job).

    python -m encoder run --config=experiments/pretrain.py:objective=rtd,position=rope --workdir=DIR

Options: see encoder.config.OPTIONS (size, objective, position, pooling, norm,
activation, masking, mask_rate, seed, steps, runlocal), and evals=sts_relatedness+topic:
suite tasks scored on each checkpoint (encoder/jobs/evals.py; runlocal drops the
experiment's own STS evaluator, and keeps what evals= asks for).
"""
from encoder import config as config_lib
from encoder.jobs import evals


def get_config(arg=None):
    # RoPE: at this scale learned absolute positions need ~3x the steps to start
    # using context (BUILD_NOTES.md, position ablation); the other schemes are one
    # option away (position=learned|sinusoidal|alibi|t5_bias|none).
    config = config_lib.experiment(arg, size="tiny", position="rope")
    config.model.vocab_size = 8000
    config.data.tokenizer_sample_chars = 3_000_000
    config.model.dropout = 0.0           # tiny model, small corpus: dropout only slows it
    config.model.attention_dropout = 0.0
    config.train.update(dict(num_steps=1200, batch_size=32, learning_rate=1e-3, warmup_steps=100,
                             log_every=100, eval_every=400, checkpoint_every=400))
    # a downstream curve while it trains: frozen-embedding STS on each checkpoint
    config.evals.sts_relatedness = evals.entry("embedding", task="sts_relatedness")
    return config_lib.finalize(config, arg, {"evals": evals.set_from_tasks})
