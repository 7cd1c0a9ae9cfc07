"""`encoder merge` compares what defines a tokenization, not the tokenizer file's bytes (issue
36: two runs of one config could never merge, their sp.model files recording the temporary
paths they were trained from), and names the field where two tokenizations differ."""
import os
import shutil

import pytest

from encoder.data import corpus, tokenization, tokenizer as tokenizer_lib
from encoder.jobs import merge


@pytest.fixture(scope="module")
def texts():
    return corpus.stdlib_documents()[:60]


def _train(texts, folder, vocab_size=300, **spm_args):
    """A sentencepiece model as the codebase trains one (or with spm_args changed)."""
    if not spm_args:
        return tokenizer_lib.load(tokenizer_lib.train_sentencepiece(texts, str(folder / "sp"),
                                                                    vocab_size))
    import sentencepiece as spm
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / "input.txt"
    text.write_text("\n".join(line for t in texts for line in t.splitlines() if line.strip()))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(folder / "sp"), vocab_size=vocab_size,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="[PAD]", unk_piece="[UNK]",
        bos_piece="[CLS]", eos_piece="[SEP]", control_symbols=["[MASK]"],
        hard_vocab_limit=False, minloglevel=2, **spm_args)
    return tokenizer_lib.load(str(folder / "sp.model"))


def test_two_trainings_of_one_config_are_one_tokenization(texts, tmp_path):
    a, b = _train(texts, tmp_path / "a"), _train(texts, tmp_path / "b")
    with open(a.path, "rb") as f, open(b.path, "rb") as g:
        assert f.read() != g.read()  # the bytes differ (the trainer's input path) ...
    ta, tb = tokenization.tokenization(a), tokenization.tokenization(b)
    assert tokenization.tokenization_diff(ta, tb) == []  # ... the tokenization does not
    assert ta["trainer"]["model_type"] == "unigram" and ta["normalizer"]["name"] == "nmt_nfkc"
    assert ta["special ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert ta["pieces"][4] == ("[MASK]", 0.0, 3) and len(ta["pieces"]) == a.vocab_size


def test_a_different_tokenization_names_the_field(texts, tmp_path):
    base = tokenization.tokenization(_train(texts, tmp_path / "a"))
    smaller = tokenization.tokenization(_train(texts, tmp_path / "small", vocab_size=200))
    diff = tokenization.tokenization_diff(smaller, base)
    assert diff[0].startswith("vocab_size: 200 vs 300") and any(
        d.startswith("pieces: 200 vs 300") for d in diff), diff
    identity = tokenization.tokenization(_train(texts, tmp_path / "id",
                                         normalization_rule_name="identity"))
    diff = tokenization.tokenization_diff(identity, base)
    assert "normalizer.name: 'identity' vs 'nmt_nfkc'" in diff, diff
    bpe = tokenization.tokenization(_train(texts, tmp_path / "bpe", model_type="bpe"))
    assert "trainer.model_type: 'bpe' vs 'unigram'" in tokenization.tokenization_diff(bpe, base)


def _retrained_path(model: bytes) -> bytes:
    """The same model as if trained from another temporary file: the trainer's `input`
    path (TrainerSpec field 1) replaced by another of the same length."""
    trainer = next(v for n, v in tokenization._wire(model) if n == 2)
    path = next(v for n, v in tokenization._wire(trainer) if n == 1)
    other = path[:-5] + (b"X" if path[-5:-4] != b"X" else b"Y") + path[-4:]
    assert len(other) == len(path) and other != path
    return model.replace(path, other)


def test_merge_of_two_runs_of_one_config_runs_and_a_different_one_is_named(
        tiny_pretrained, tmp_path):
    twin = str(tmp_path / "twin")
    shutil.copytree(tiny_pretrained, twin, ignore=shutil.ignore_patterns(
        "LOCK", "cache", "tensorboard"))
    twin_model = os.path.join(twin, "tokenizer", "sp.model")
    with open(twin_model, "rb") as f:
        original = f.read()
    with open(twin_model, "wb") as f:  # what a second run of the same config writes
        f.write(_retrained_path(original))
    with open(twin_model, "rb") as f:
        assert f.read() != original
    record = merge.merge(f"{tiny_pretrained},{twin}", str(tmp_path / "m"))
    assert len(record["inputs"]) == 2
    # a tokenizer trained on other text: refused, naming what differs
    tok = tokenizer_lib.load(twin_model)
    retrained = tokenizer_lib.train_sentencepiece(
        corpus.stdlib_documents()[:60], str(tmp_path / "re" / "sp"), tok.vocab_size)
    shutil.copyfile(retrained, twin_model)
    with pytest.raises(ValueError, match=r"different tokenizers \(the same token ids would "
                                         r"mean different text\): .*pieces: "):
        merge.merge(f"{tiny_pretrained},{twin}", str(tmp_path / "m2"))
