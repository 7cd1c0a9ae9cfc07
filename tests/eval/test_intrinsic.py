"""Intrinsic evaluation and embeddings: MiniLM parity with sentence-transformers, PPPL."""
import numpy as np
import pytest

from encoder.data import tokenizer as tokenizer_lib
from helpers import TORCH_GROUP, minilm_dir

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)


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
