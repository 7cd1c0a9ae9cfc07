"""BPE tokenizers as tokenizer.json: a sentencepiece BPE model exported with its merges
rebuilt, and a byte-level BPE folder, give transformers' AutoTokenizer exactly our ids on
300 texts (singles and pairs); `load` reads any tokenizer.json folder (WordPiece,
byte-level BPE, unigram, sentencepiece BPE) by role."""
import json
import os

import pytest

from encoder.data import corpus, tokenizer as tokenizer_lib
from encoder.interop import hf_tokenizer
from helpers import TORCH_GROUP, LazyModule, awkward_texts

pytestmark = TORCH_GROUP  # imports transformers (helpers.TORCH_GROUP)

T = LazyModule("transformers")


def training_texts(chars=200_000):
    texts, n = [], 0
    for doc in corpus.stdlib_documents()[::3]:
        texts.append(doc)
        n += len(doc)
        if n >= chars:
            break
    return texts


@pytest.fixture(scope="module")
def sp_bpe(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("sp_bpe"))
    return tokenizer_lib.load(tokenizer_lib.train_tokenizer("bpe", training_texts(), folder, 800))


@pytest.fixture(scope="module")
def byte_bpe(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("byte_bpe"))
    return tokenizer_lib.train_tokenizer("byte_bpe", training_texts(), folder, 1000)


def assert_autotokenizer_parity(tok, auto, texts):
    """Singles and pairs ([CLS] a [SEP] b [SEP], token types) equal, id for id."""
    singles = pairs = 0
    for a, b in zip(texts, texts[1:] + texts[:1]):
        b = b or "pair"  # an empty text_pair is no pair to transformers
        singles += auto(a, add_special_tokens=False)["input_ids"] == tok.encode(a)
        ours = tok.encode_example(a, b, max_len=4096)
        n = int(ours["attention_mask"].sum())
        theirs = auto(a, b)
        pairs += (theirs["input_ids"] == ours["input_ids"][:n].tolist()
                  and theirs.get("token_type_ids", ours["segment_ids"][:n].tolist())
                  == ours["segment_ids"][:n].tolist())
    assert (auto.mask_token_id, auto.pad_token_id, auto.cls_token_id, auto.sep_token_id,
            auto.unk_token_id) == (tok.mask_id, tok.pad_id, tok.cls_id, tok.sep_id, tok.unk_id)
    return singles, pairs


def test_sentencepiece_bpe_exports_with_autotokenizers_ids(sp_bpe, tmp_path):
    hf_tokenizer.write(sp_bpe, str(tmp_path), 4096)
    auto = T.AutoTokenizer.from_pretrained(tmp_path)
    texts = awkward_texts()
    assert len(texts) == 300
    singles, pairs = assert_autotokenizer_parity(sp_bpe, auto, texts)
    docs = corpus.stdlib_documents()[2::9][:300]  # whole documents: code, tables, unicode
    whole = sum(auto(d, add_special_tokens=False)["input_ids"] == sp_bpe.encode(d) for d in docs)
    print(f"sentencepiece BPE export: {singles}/300 singles, {pairs}/300 pairs, "
          f"{whole}/{len(docs)} documents equal")
    assert (singles, pairs, whole) == (300, 300, len(docs))
    # the exported folder matches special strings by design (the fill-mask pipeline)
    assert auto("a [MASK] b")["input_ids"].count(sp_bpe.mask_id) == 1
    # and `load` reads it back as the same tokenizer
    back = tokenizer_lib.load(str(tmp_path))
    assert all(back.encode(t) == sp_bpe.encode(t) for t in texts)
    assert (back.word_start_table() == sp_bpe.word_start_table()).all()


def test_bpe_merges_rebuild_every_split_of_a_piece():
    pieces = [("[PAD]", 0.0), ("a", -5.0), ("b", -6.0), ("c", -7.0), ("ab", -1.0),
              ("bc", -2.0), ("abc", -3.0)]
    assert hf_tokenizer.bpe_merges(pieces, exclude={0}) == [
        ("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")]


def test_byte_bpe_folder_gives_autotokenizers_ids(byte_bpe, tmp_path):
    tok = tokenizer_lib.load(byte_bpe)
    texts = awkward_texts()
    auto = T.AutoTokenizer.from_pretrained(byte_bpe)
    singles, pairs = assert_autotokenizer_parity(tok, auto, texts)
    decoded = sum(auto.decode(tok.encode(t)) == t for t in texts)
    print(f"byte-level BPE folder: {singles}/300 singles, {pairs}/300 pairs, {decoded}/300 "
          "decoded back by transformers")
    assert (singles, pairs, decoded) == (300, 300, 300)
    # split_special_tokens holds for transformers too: literal "[MASK]" is text
    assert tok.mask_id not in auto("a [MASK] b")["input_ids"]
    # exported with a model (interop's writer): AutoTokenizer still gives our ids
    hf_tokenizer.write(tok, str(tmp_path), 4096, token_types=False)
    exported = T.AutoTokenizer.from_pretrained(tmp_path)
    assert all(exported(t, add_special_tokens=False)["input_ids"] == tok.encode(t) for t in texts)
    assert "token_type_ids" not in exported("a", "b")


def test_load_reads_any_tokenizer_json_folder(tmp_path):
    """WordPiece and RoBERTa-named byte-level folders without any role file, by role."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    texts = training_texts(60_000)
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.decoder = decoders.WordPiece()
    wp.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=list(tokenizer_lib.SPECIAL_TOKENS), show_progress=False))
    os.makedirs(tmp_path / "wordpiece")
    wp.save(str(tmp_path / "wordpiece" / "tokenizer.json"))
    tok = tokenizer_lib.load(str(tmp_path / "wordpiece"))
    assert (tok.cls_id, tok.mask_id) == (2, 4) and not tok.byte_level
    assert tok.encode("Hello world") == wp.encode("Hello world", add_special_tokens=False).ids
    table = tok.word_start_table()
    assert all(table[i] == (not p.startswith("##")) for p, i in wp.get_vocab().items() if i >= 5)

    roberta = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's names and order
    bb = Tokenizer(models.BPE())
    bb.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bb.decoder = decoders.ByteLevel()
    bb.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=roberta, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    os.makedirs(tmp_path / "roberta")
    bb.save(str(tmp_path / "roberta" / "tokenizer.json"))
    tok = tokenizer_lib.load(str(tmp_path / "roberta"))
    assert (tok.cls_id, tok.pad_id, tok.sep_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.byte_level and tok.decode(tok.encode(texts[0])) == texts[0]
    # a role file still wins over the names found in the vocabulary
    with open(tmp_path / "roberta" / "special_tokens_map.json", "w") as f:
        json.dump({"cls_token": "</s>", "sep_token": "<s>"}, f)
    tok = tokenizer_lib.load(str(tmp_path / "roberta"))
    assert (tok.cls_id, tok.sep_id, tok.mask_id) == (2, 0, 4)
