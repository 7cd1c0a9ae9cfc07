"""A corpus a source's vocabulary cannot spell is said with its unknown-token rate (once silent
when 82% of a corpus became [UNK]): all-MiniLM-L6-v2's WordPiece on Cherokee and English."""
import numpy as np

from encoder.data import tokenizer as tokenizer_lib
from encoder.jobs import pretrain_checks
from helpers import minilm_dir


def _counts(tok, texts):
    ids = [i for t in texts for i in tok.encode(t)]
    return np.bincount(np.asarray(ids), minlength=tok.vocab_size), ids


def test_the_unknown_token_rate_is_said():
    tok = tokenizer_lib.load(minilm_dir())
    texts = ["ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ ᎠᏂᏴᏫᏯ"] * 8 + ["the cat sat on the mat"] * 2
    counts, ids = _counts(tok, texts)
    unk = ids.count(tok.unk_id)
    assert unk > len(ids) / 2
    line = pretrain_checks.unknown_tokens(counts, tok)
    assert line.startswith(f"data: {unk / len(ids):.1%} of the training tokens ({unk:,} of "
                           f"{len(ids):,}) are the unknown token '[UNK]'")
    assert "cannot spell much of this corpus" in line


def test_english_is_quiet_unless_the_run_continues_a_source():
    tok = tokenizer_lib.load(minilm_dir())
    counts, ids = _counts(tok, ["the cat sat on the mat"] * 5)
    assert pretrain_checks.unknown_tokens(counts, tok) is None
    assert pretrain_checks.unknown_tokens(counts, tok, always=True) == (
        f"data: 0.0% of the training tokens (0 of {len(ids):,}) are the unknown token '[UNK]'")
