"""Intrinsic evaluation and embeddings: MiniLM parity with sentence-transformers, PPPL."""
import sys

import jax
import numpy as np

from helpers import ROOT


def test_pseudo_perplexity_is_lower_on_the_training_domain(tmp_path):
    """A tiny model trained on an ordered corpus scores it far better than its shuffled tokens.

    The domain: runs of a 16-word cycle ("alpha bravo charlie ..."), which a
    2-layer RoPE encoder learns in about a hundred steps; shuffling the tokens of
    each row keeps the unigram statistics and destroys the order.
    """
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    from encoder.data import pipeline
    from encoder.eval import pseudo_perplexity
    from encoder.objectives import objectives
    from encoder.checkpoints import sources
    from encoder.jobs import pretrain as pretrain_job
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
             "november oscar papa").split()
    rng = np.random.default_rng(0)
    docs = [" ".join(words[(k + j) % 16] for j in range(40)) for k in rng.integers(0, 16, 300)]
    (tmp_path / "train.txt").write_text("\n\n".join(docs))
    config = pretrain.get_config("runlocal,position=rope")
    config.data.train_files = config.data.valid_files = str(tmp_path / "train.txt")
    config.data.max_held_out_overlap = 1.0  # no held-out figure is read here: the same text
    config.model.vocab_size = 100
    config.train.update(dict(num_steps=120, learning_rate=3e-3, eval_every=0,
                             checkpoint_every=120, log_every=40))
    pretrain_job.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    p = sources.load(str(tmp_path / "run"))
    rows = pipeline.build_rows(docs[:20], p.tokenizer, p.run_config.data)
    shuffled = rows["input_ids"].copy()
    for r in range(len(shuffled)):
        real = np.flatnonzero((rows["attention_mask"][r] == 1) & (shuffled[r] > 4))
        shuffled[r, real] = shuffled[r, rng.permutation(real)]
    model = objectives.OBJECTIVES["mlm"].build_model(p.run_config)

    def apply_fn(ids, seg, mask, pos):
        return model.apply({"params": p.params}, ids, seg, mask, mlm_positions=pos)[0]["mlm_logits"]

    scores = {}
    for name, ids in (("domain", rows["input_ids"]), ("shuffled", shuffled)):
        lp = pseudo_perplexity.token_log_probs(apply_fn, ids, rows["attention_mask"],
                                               p.tokenizer.special_ids, p.tokenizer.mask_id, 128)
        scores[name] = pseudo_perplexity.pseudo_perplexity(lp)
    print(scores)
    assert scores["domain"] < 0.5 * scores["shuffled"]
