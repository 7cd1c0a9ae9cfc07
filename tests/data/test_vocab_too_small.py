"""A tokenizer vocabulary smaller than the training sample's characters: one
UsageError naming the command's flag and the least size sentencepiece accepts (which then
trains), and no half-made output folder left behind."""
import os

import pytest

from encoder import errors
from encoder.data import preparation
from encoder.data import tokenizer as tokenizer_lib


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """~120 distinct characters (Latin, Greek, Cyrillic), each often enough to be kept."""
    chars = [chr(c) for c in list(range(0x61, 0x7B)) + list(range(0x3B1, 0x3CA))
             + list(range(0x430, 0x450)) + list(range(0x41, 0x5B))]
    words = ["".join(chars[(i * 7 + j) % len(chars)] for j in range(5)) for i in range(400)]
    path = tmp_path_factory.mktemp("text") / "doc.txt"
    path.write_text("\n\n".join(" ".join(words[i:i + 40]) for i in range(0, 400, 40)) + "\n")
    return str(path)


def test_prepare_names_vocab_size_and_the_least_that_works(text, tmp_path):
    out = tmp_path / "c"
    with pytest.raises(errors.UsageError, match=r"--vocab_size=40: the tokenizer needs at least "
                                                r"(\d+) pieces .*give --vocab_size=\1 or more"
                       ) as e:
        preparation.prepare(text, str(out), preparation.Settings(valid_fraction=0.0),
                            vocab_size=40)
    assert not out.exists()  # refused before anything of the corpus was written
    least = int(str(e.value).split("at least ")[1].split()[0])
    assert least > 40
    preparation.prepare(text, str(out), preparation.Settings(valid_fraction=0.0),
                        vocab_size=least)
    assert tokenizer_lib.load(str(out / "tokenizer" / "sp.model")).vocab_size >= least


def test_the_pretraining_path_names_its_own_flag(text, tmp_path):
    units, _ = preparation.plan_units(text, preparation.Settings(valid_fraction=0.0))
    path = tmp_path / "wd" / "tokenizer" / "sp.model"
    with pytest.raises(errors.UsageError, match=r"--config.model.vocab_size=30: .*give "
                                                r"--config.model.vocab_size=\d+ or more"):
        preparation.train_tokenizer(units, preparation.Settings(valid_fraction=0.0), str(path),
                                    30, flag="--config.model.vocab_size")
    assert not path.parent.exists()  # the tokenizer folder it made, removed again


def test_a_vocabulary_the_sample_cannot_fill_is_said(tmp_path, text, capsys):
    """sentencepiece (hard_vocab_limit off) stops where the sample has no more pieces: the
    size asked and the size got are both said, never a silent 2,229 for 32,768."""
    s = preparation.Settings(valid_fraction=0.0)
    units, _ = preparation.plan_units(text, s)
    path = preparation.train_tokenizer(units, s, str(tmp_path / "tok" / "sp.model"), 32768)
    got = tokenizer_lib.load(path).vocab_size
    assert got < 32768
    assert f"tokenizer: {got:,} pieces, fewer than --vocab_size=32768" in capsys.readouterr().out
