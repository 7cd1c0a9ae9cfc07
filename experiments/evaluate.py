"""Intrinsic evaluation of a pretrained model: held-out MLM loss/accuracy and pseudo-perplexity.

    python -m encoder run --config=experiments/evaluate.py --config.init_from=WORKDIR \
        [--config.data.valid_files=held_out.txt] --workdir=DIR

Options: runlocal (a 2,000-token budget), seed. The protocol (encoder/jobs/evaluate.py
`protocol`, recorded in eval.json) is this file's, whatever kind of source is scored:
BERT's 15% token masking 80/10/10, the document mask on; any field is an override
(--config.eval.masking.rate=0.3).
"""
import ml_collections

from encoder.finetune import config as finetune_config


def get_config(arg=None):
    config = finetune_config.get_config(arg, job="evaluate")
    config.eval.masking = ml_collections.ConfigDict(dict(
        mode="token", rate=0.15, mask_prob=0.8, random_prob=0.1, span_p=0.2))
    config.eval.document_mask = True
    config.eval.restart_positions = False
    if config.train.num_epochs:  # runlocal was given
        config.eval.max_tokens = 2000
    return config
