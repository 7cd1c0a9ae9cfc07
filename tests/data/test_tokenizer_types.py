"""The tokenizer types by name (unigram, bpe, byte_bpe): byte-level BPE folders read back by
`load`, exact round trips, word starts and offsets of byte pieces, the vocabulary padding
size, and the unknown-name error (AutoTokenizer parity: tests/interop/test_tokenizer_export_bpe.py)."""
import json
import os

import numpy as np
import pytest

from encoder.data import corpus, tokenizer as tokenizer_lib
from helpers import awkward_texts


def training_texts(chars=200_000):
    """~200 KB of stdlib documentation, every third document."""
    texts, n = [], 0
    for doc in corpus.stdlib_documents()[::3]:
        texts.append(doc)
        n += len(doc)
        if n >= chars:
            break
    return texts


@pytest.fixture(scope="module")
def byte_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("byte_bpe"))
    assert tokenizer_lib.train_tokenizer("byte_bpe", training_texts(), folder, 1000) == folder
    return folder


def test_tokenizer_types_are_a_table_and_an_unknown_name_lists_them(tmp_path):
    assert set(tokenizer_lib.TOKENIZER_TYPES) == {"unigram", "bpe", "byte_bpe"}
    with pytest.raises(ValueError, match="Unknown tokenizer type 'wordpiece'; valid names: "
                                         "bpe, byte_bpe, unigram"):
        tokenizer_lib.train_tokenizer("wordpiece", ["some text"], str(tmp_path), 300)
    with pytest.raises(ValueError, match="valid names: bpe, unigram"):
        tokenizer_lib.train_sentencepiece(["some text"], str(tmp_path / "sp"), 300, "byte_bpe")


def test_byte_bpe_folder_keeps_the_special_ids_and_loads_back(byte_folder):
    tok = tokenizer_lib.load(byte_folder)
    assert isinstance(tok, tokenizer_lib.HFTokenizer) and tok.byte_level
    assert tok.vocab_size == 1000
    assert [tok.id_to_piece(i) for i in range(5)] == list(tokenizer_lib.SPECIAL_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    # the file itself, and a copy written by save, read back the same
    assert tokenizer_lib.load(os.path.join(byte_folder, "tokenizer.json")).encode("x = 1") == \
        tok.encode("x = 1")
    with open(os.path.join(byte_folder, "tokenizer_config.json")) as f:
        assert json.load(f)["split_special_tokens"] is True


def test_byte_bpe_round_trips_exactly_and_never_produces_special_ids(byte_folder):
    tok = tokenizer_lib.load(byte_folder)
    texts = awkward_texts() + corpus.stdlib_documents()[1::13][:300]
    assert len(texts) == 600
    encoded = tok.encode_batch(texts)
    assert encoded == [tok.encode(t) for t in texts]
    bad = [t for t, ids in zip(texts, encoded) if tok.decode(ids) != t]
    specials = sum(bool(set(ids) & set(tok.special_ids)) for ids in encoded)
    print(f"{len(texts)} texts: {len(bad)} round-trip failures, {specials} with special ids")
    assert not bad and not specials
    # literal special strings are ordinary text, as in our sentencepiece models
    text = "[CLS] some text [MASK] and [SEP] [PAD] [UNK]"
    ids = tok.encode(text)
    assert not set(ids) & set(tok.special_ids) and tok.decode(ids) == text


def test_byte_pieces_offsets_and_word_starts(byte_folder):
    tok = tokenizer_lib.load(byte_folder)
    text = "hello  world\n\tfoo(x) \u00fcber \U0001F600"
    ids, offsets = tok.encode_with_offsets(text)
    assert len(ids) == len(offsets)
    for (start, end), i in zip(offsets, ids):
        assert 0 <= start <= end <= len(text)
        assert not text[start:end][:1].isspace()  # the interface's contract: no leading space
    # each span holds its piece's text, less the whitespace before it
    alphabet = {c: b for b, c in tokenizer_lib.byte_alphabet().items()}
    for (start, end), i in zip(offsets, ids):
        raw = bytes(alphabet[c] for c in tok.id_to_piece(i))
        if raw.strip() and raw.decode("utf-8", "ignore"):  # whole characters only
            assert raw.decode().strip() == text[start:end].strip(), (raw, text[start:end])
    table = tok.word_start_table()
    assert table.shape == (tok.vocab_size,) and table[list(tok.special_ids)].all()
    for piece, i in tok.tok.get_vocab().items():
        if i >= 5:
            assert table[i] == (piece[0] in "\u0120\u010a\u0109\u010d\u010b\u010c"), piece
    words = [tok.id_to_piece(i) for i, start in zip(ids, table[ids]) if start]
    assert any(w.startswith("\u0120w") for w in words)  # "  world"
    assert not table[ids[0]]  # the text's first word has no space before it (ModernBERT's way)


def test_byte_bpe_training_is_deterministic_and_fingerprinted(byte_folder, tmp_path):
    again = tokenizer_lib.train_byte_bpe(training_texts(), str(tmp_path / "again"), 1000)
    assert tokenizer_lib.load(again).fingerprint() == tokenizer_lib.load(byte_folder).fingerprint()
    other = tokenizer_lib.train_byte_bpe(training_texts(), str(tmp_path / "other"), 600)
    assert tokenizer_lib.load(other).fingerprint() != tokenizer_lib.load(byte_folder).fingerprint()
    saved = tokenizer_lib.load(byte_folder).save(str(tmp_path / "saved"))
    back = tokenizer_lib.load(saved)
    assert back.split_special_tokens and back.fingerprint() == tokenizer_lib.load(
        byte_folder).fingerprint()
    with pytest.raises(ValueError, match="vocab_size >= 261"):
        tokenizer_lib.train_byte_bpe(["text"], str(tmp_path / "small"), 200)
    with pytest.raises(ValueError, match="empty corpus"):
        tokenizer_lib.train_byte_bpe(["", ""], str(tmp_path / "empty"), 300)


def test_every_type_trains_by_name_into_a_folder_load_reads(tmp_path):
    texts = training_texts(60_000)
    for name in tokenizer_lib.TOKENIZER_TYPES:
        folder = str(tmp_path / name)
        path = tokenizer_lib.train_tokenizer(name, texts, folder, 400)
        assert os.path.exists(os.path.join(folder, tokenizer_lib.tokenizer_type(name).filename))
        by_path, by_folder = tokenizer_lib.load(path), tokenizer_lib.load(folder)
        assert by_path.fingerprint() == by_folder.fingerprint()
        assert by_folder.mask_id == tokenizer_lib.MASK_ID
        assert by_folder.decode(by_folder.encode("a short text")) == "a short text"


def test_padded_vocab_size():
    assert [tokenizer_lib.padded_vocab_size(n) for n in (1, 64, 65, 50280)] == [64, 64, 128, 50304]
    assert tokenizer_lib.padded_vocab_size(1000, 0) == 1000
    assert tokenizer_lib.padded_vocab_size(1000, 1) == 1000
    with pytest.raises(ValueError):
        tokenizer_lib.padded_vocab_size(0)
    assert np.all([tokenizer_lib.padded_vocab_size(n, 128) % 128 == 0 for n in range(1, 400)])


def test_a_truncated_tokenizer_json_is_named(tmp_path):
    from encoder.data import tokenizer as tokenizer_lib
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "voc')
    with pytest.raises(ValueError, match=r"tokenizer.json: not a readable tokenizer.json .*"
                                         r"truncated or damaged"):
        tokenizer_lib.load(str(folder))
