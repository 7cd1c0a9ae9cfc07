"""Tokenizers: one small interface over sentencepiece and HuggingFace tokenizer.json folders.

Our own tokenizers reserve fixed ids for the special tokens:
[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, whatever the model type. In
sentencepiece models they are control symbols, so normal text never produces
them (the string "[MASK]" in text is split into ordinary pieces).

Three types are trained here, by name (TOKENIZER_TYPES): sentencepiece
`unigram` and `bpe`, and `byte_bpe`, a byte-level BPE (GPT-2's byte alphabet,
as RoBERTa, OLMo and ModernBERT use) trained with the HuggingFace `tokenizers`
library and saved as a tokenizer.json folder. The byte-level model keeps the
same five strings at the same ids (see `train_byte_bpe` for why). An imported
HuggingFace checkpoint brings its own tokenizer.json (WordPiece, byte-level
BPE, unigram) or vocab.txt behind the same interface.

`word_start_table()` marks, for every vocabulary id, whether the piece starts
a word; whole-word and span masking read it on device.
"""
import abc
import dataclasses
import json
import os
import tempfile
from typing import Callable, Iterable, Sequence

import numpy as np

from encoder import registry

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)
ROLES = ("pad", "unk", "cls", "sep", "mask")  # SPECIAL_TOKENS' roles, in id order


class Tokenizer(abc.ABC):
    """What the rest of the codebase needs from a tokenizer."""
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int: ...

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Text -> ids, no special tokens."""

    def encode_batch(self, texts: Sequence[str], num_threads: int = 0) -> list[list[int]]:
        """Texts -> ids; num_threads 0: all cores (where the backend threads at all)."""
        return [self.encode(t) for t in texts]

    @abc.abstractmethod
    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Text -> (ids, [(char_start, char_end)]), spans without leading whitespace."""

    @abc.abstractmethod
    def save(self, folder: str) -> str:
        """Writes the vocabulary into folder; returns the path that `load` reads back."""

    @abc.abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; special tokens are dropped."""

    @abc.abstractmethod
    def id_to_piece(self, i: int) -> str:
        """The vocabulary entry of one id (special tokens by their strings)."""

    @abc.abstractmethod
    def word_start_table(self) -> np.ndarray:
        """bool [V]: True where a piece begins a new word (special tokens too)."""

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(sorted({self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}))

    def fingerprint(self) -> str:
        """A string that changes whenever the tokenization would."""
        raise NotImplementedError

    def encode_example(self, text: str, pair: str | None = None, max_len: int = 128) -> dict:
        """[CLS] a [SEP] (b [SEP]) padded to max_len, truncating the longer side first.

        Returns int32 arrays input_ids, segment_ids, attention_mask of length max_len.
        """
        return self.example_from_ids(self.encode(text),
                                     self.encode(pair) if pair is not None else None, max_len)

    def example_from_ids(self, a: list, b: list | None = None, max_len: int = 128) -> dict:
        """encode_example's arrays from token ids already encoded (a prepared corpus's)."""
        a, b = truncate_longest_first(a, b, max_len - (3 if b is not None else 2))
        ids = [self.cls_id] + a + [self.sep_id]
        seg = [0] * len(ids)
        if b is not None:
            ids += b + [self.sep_id]
            seg += [1] * (len(b) + 1)
        n = len(ids)
        pad = max_len - n
        return {
            "input_ids": np.asarray(ids + [self.pad_id] * pad, np.int32),
            "segment_ids": np.asarray(seg + [0] * pad, np.int32),
            "attention_mask": np.asarray([1] * n + [0] * pad, np.int32),
        }


def truncate_longest_first(a: list, b: list | None, budget: int):
    """Drops tokens from the end of the longer sequence until both fit in budget."""
    if budget < (2 if b is not None else 1):
        raise ValueError(f"max_len leaves room for {budget} tokens; too short for the input")
    a = list(a)
    if b is None:
        return a[:budget], None
    b = list(b)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    return a, b


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece model with this codebase's fixed special ids."""
    pad_id, unk_id, cls_id, sep_id, mask_id = PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID

    def __init__(self, model_path: str):
        import sentencepiece as spm
        self.path = model_path
        if not os.path.isfile(model_path):
            raise FileNotFoundError(2, "no such tokenizer (a sentencepiece .model file or a "
                                    "HuggingFace tokenizer folder)", model_path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=model_path)
        except RuntimeError as e:  # sentencepiece reports a bad file as a RuntimeError
            raise ValueError(f"{model_path}: not a sentencepiece model "
                             f"({str(e).splitlines()[0]})") from None
        found = [self.sp.id_to_piece(i) for i in range(len(SPECIAL_TOKENS))]
        if tuple(found) != SPECIAL_TOKENS:
            raise ValueError(f"{model_path}: expected special pieces {SPECIAL_TOKENS} at ids 0-4, "
                             f"found {tuple(found)}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts, num_threads: int = 0):
        return self.sp.encode(list(texts), num_threads=num_threads or os.cpu_count() or 1)

    def encode_with_offsets(self, text):
        proto = self.sp.encode(text, return_type="proto")
        # sentencepiece reports UTF-8 byte offsets; map them to characters.
        byte_to_char = np.zeros(len(text.encode("utf-8")) + 1, np.int64)
        pos = 0
        for i, ch in enumerate(text):
            n = len(ch.encode("utf-8"))
            byte_to_char[pos:pos + n] = i
            pos += n
        byte_to_char[pos] = len(text)
        ids, offsets = [], []
        for piece in proto.pieces:
            start, end = int(byte_to_char[piece.begin]), int(byte_to_char[piece.end])
            while start < end and text[start].isspace():
                start += 1
            ids.append(piece.id)
            offsets.append((start, end))
        return ids, offsets

    def decode(self, ids):
        return self.sp.decode([int(i) for i in ids if int(i) >= len(SPECIAL_TOKENS)])

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    def word_start_table(self) -> np.ndarray:
        pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        table = np.array([p.startswith("\u2581") for p in pieces])
        table[: len(SPECIAL_TOKENS)] = True
        return table

    def fingerprint(self) -> str:
        import hashlib
        with open(self.path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]

    def save(self, folder: str) -> str:
        """Copies the model into folder/sp.model; returns the path `load` takes."""
        import shutil
        os.makedirs(folder, exist_ok=True)
        dst = os.path.join(folder, "sp.model")
        if os.path.abspath(dst) != os.path.abspath(self.path):
            shutil.copyfile(self.path, dst)
        return dst


def _sample(texts: Iterable[str], max_chars: int) -> Iterable[str]:
    """texts until max_chars of them have been yielded (whole texts, the last one included)."""
    written = 0
    for text in texts:
        yield text
        written += len(text)
        if written >= max_chars:
            return


def train_sentencepiece(texts: Iterable[str], model_prefix: str, vocab_size: int,
                        model_type: str = "unigram", max_chars: int = 4_000_000) -> str:
    """Trains a sentencepiece model on texts; returns the .model path.

    Writes at most max_chars of text to a temporary file first (sentencepiece
    samples sentences anyway; this bounds memory and time on large corpora).
    """
    import sentencepiece as spm
    registry.lookup({"unigram": 0, "bpe": 0}, model_type, "sentencepiece model type")
    os.makedirs(os.path.dirname(os.path.abspath(model_prefix)), exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        written = 0
        for text in texts:
            for line in text.splitlines():
                line = line.strip()
                if line:
                    f.write(line + "\n")
                    written += len(line) + 1
            if written >= max_chars:
                break
        path = f.name
    if written == 0:
        os.unlink(path)
        raise ValueError("cannot train a tokenizer on an empty corpus")
    try:
        spm.SentencePieceTrainer.train(
            input=path, model_prefix=model_prefix, vocab_size=vocab_size, model_type=model_type,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=CLS_ID, eos_id=SEP_ID,
            pad_piece="[PAD]", unk_piece="[UNK]", bos_piece="[CLS]", eos_piece="[SEP]",
            control_symbols=["[MASK]"], character_coverage=0.9995, byte_fallback=False,
            hard_vocab_limit=False, num_threads=os.cpu_count() or 1,
            input_sentence_size=2_000_000, shuffle_input_sentence=True, minloglevel=2)
    finally:
        os.unlink(path)
    return model_prefix + ".model"


# GPT-2's byte alphabet (Radford et al. 2019, §2.2), which RoBERTa, OLMo and ModernBERT
# keep: the 188 printable bytes stand for themselves, the other 68 (controls, space,
# 0x7f-0xa0, 0xad) for U+0100 onwards in byte order, so space is 'Ġ' and newline 'Ċ'.
def byte_alphabet() -> dict[int, str]:
    """byte -> the character a byte-level BPE piece writes it as."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_LEVEL_MIN_VOCAB = len(SPECIAL_TOKENS) + 256  # the specials and every byte, no merge yet


def train_byte_bpe(texts: Iterable[str], folder: str, vocab_size: int, min_frequency: int = 2,
                   max_chars: int = 4_000_000) -> str:
    """Trains a byte-level BPE (ModernBERT/OLMo style) into folder/tokenizer.json; returns folder.

    Byte level: the ByteLevel pre-tokenizer (GPT-2's regex split, no prefix space) and
    decoder, no normaliser, all 256 bytes in the vocabulary. Any text then encodes
    without [UNK] and decodes back to itself exactly; a word after a space starts
    with 'Ġ', the first word of a text does not (as in ModernBERT, so " the" and "the"
    are different pieces).

    The special tokens keep this codebase's ids and strings, [PAD]=0 [UNK]=1 [CLS]=2
    [SEP]=3 [MASK]=4, rather than a byte-level model's usual place at the end of the
    vocabulary (ModernBERT: 50280-50284) or RoBERTa's <s> </s> <pad> <unk> <mask>:
      * the ids: the masking draws its random replacements from [max(special)+1, V),
        which is empty with the specials last; a shape-only compile
        (objectives.pretraining.ShapeOnlyTokenizer), padded rows and prepared corpora
        all assume 0-4, so a byte-level run changes nothing downstream of the ids;
      * the strings: ModernBERT names them the same way over its byte-level BPE, and
        `load` finds BERT's names by role without any config file.
    [UNK] is never produced (every byte is a piece); it stays so that all five roles
    exist for every tokenizer. Texts never produce the special ids either, as with our
    sentencepiece models' control symbols: the folder's tokenizer_config.json sets
    `split_special_tokens` (which transformers' AutoTokenizer also honours), so a
    literal "[MASK]" in a corpus is ordinary text.

    Texts are whole documents (their newlines and indentation become pieces), at most
    max_chars of them. Training is deterministic for the same texts.
    """
    from tokenizers import Tokenizer as FastTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    if vocab_size < BYTE_LEVEL_MIN_VOCAB:
        raise ValueError(f"a byte-level BPE needs vocab_size >= {BYTE_LEVEL_MIN_VOCAB} (the "
                         f"{len(SPECIAL_TOKENS)} special tokens and 256 bytes), got {vocab_size}")
    texts = [t for t in _sample(texts, max_chars) if t]
    if not texts:
        raise ValueError("cannot train a tokenizer on an empty corpus")
    tok = FastTokenizer(models.BPE())  # no unk_token: every byte is in the vocabulary
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),  # ids 0-4, in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer, length=len(texts))
    found = tuple(tok.id_to_token(i) for i in range(len(SPECIAL_TOKENS)))
    if found != SPECIAL_TOKENS:  # the trainer's contract; checked, not assumed
        raise AssertionError(f"byte-level BPE special tokens at ids 0-4: {found}")
    cls, sep = SPECIAL_TOKENS[CLS_ID], SPECIAL_TOKENS[SEP_ID]
    # For transformers' users only: HFTokenizer encodes without it.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, CLS_ID), (sep, SEP_ID)])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    _write_hf_configs(folder, dict(zip(ROLES, SPECIAL_TOKENS)), split_special_tokens=True)
    return folder


def padded_vocab_size(n: int, multiple: int = 64) -> int:
    """n rounded up to a multiple (0 or 1: n itself).

    A vocabulary padded to a multiple of 64 keeps the embedding and MLM-logit matmuls
    on whole tiles of a GPU's tensor cores and a TPU's lanes (ModernBERT's 50,368 rows,
    a multiple of 64 over OLMo's 50,280 tokens and its own specials); the model masks the
    padding rows out of the softmax (model.real_vocab_size).
    """
    if n <= 0 or multiple < 0:
        raise ValueError(f"padded_vocab_size needs n > 0 and multiple >= 0, got {n}, {multiple}")
    if multiple <= 1:
        return n
    return -(-n // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class TokenizerType:
    """How one kind of tokenizer is trained, and what `load` reads back."""
    # (texts, folder, vocab_size, max_chars) -> the path `load` takes
    train: Callable[[Iterable[str], str, int, int], str]
    filename: str  # what training writes into folder (`load` takes folder or the file)
    description: str


def _sentencepiece_type(model_type: str) -> Callable:
    def train(texts, folder, vocab_size, max_chars=4_000_000):
        return train_sentencepiece(texts, os.path.join(folder, "sp"), vocab_size, model_type,
                                   max_chars)
    return train


def _byte_bpe(texts, folder, vocab_size, max_chars=4_000_000):
    return train_byte_bpe(texts, folder, vocab_size, max_chars=max_chars)


TOKENIZER_TYPES: dict[str, TokenizerType] = {
    "unigram": TokenizerType(_sentencepiece_type("unigram"), "sp.model",
                             "sentencepiece unigram (Kudo 2018), the default"),
    "bpe": TokenizerType(_sentencepiece_type("bpe"), "sp.model",
                         "sentencepiece BPE over characters (RoBERTa-era recipes in this codebase)"),
    "byte_bpe": TokenizerType(_byte_bpe, "tokenizer.json",
                              "byte-level BPE in a tokenizer.json folder (GPT-2/ModernBERT/OLMo)"),
}


def tokenizer_type(name: str) -> TokenizerType:
    """TOKENIZER_TYPES[name]; an unknown name raises listing the valid ones."""
    return registry.lookup(TOKENIZER_TYPES, name, "tokenizer type")


def train_tokenizer(name: str, texts: Iterable[str], folder: str, vocab_size: int,
                    max_chars: int = 4_000_000) -> str:
    """Trains a tokenizer of type name into folder; returns the path `load` reads back
    (folder/sp.model for sentencepiece, folder for byte_bpe; `load(folder)` reads both)."""
    return tokenizer_type(name).train(texts, folder, vocab_size, max_chars)



def _write_hf_configs(folder: str, names: dict, split_special_tokens: bool) -> None:
    """special_tokens_map.json and tokenizer_config.json: the roles by name, for
    transformers and for HFTokenizer."""
    roles = {f"{r}_token": names[r] for r in ROLES}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "split_special_tokens": split_special_tokens, **roles}
    for filename, value in (("special_tokens_map.json", roles), ("tokenizer_config.json", config)):
        with open(os.path.join(folder, filename), "w", encoding="utf-8") as f:
            json.dump(value, f, indent=1, ensure_ascii=False)


class HFTokenizer(Tokenizer):
    """A HuggingFace tokenizer folder (tokenizer.json: WordPiece, byte-level BPE, BPE or
    unigram; or a BERT vocab.txt).

    The special tokens are found by role in tokenizer_config.json /
    special_tokens_map.json (RoBERTa's <s> </s> <pad> <mask>, ModernBERT's,
    DeBERTa's [CLS] ...), else by BERT's names, else by RoBERTa's / T5's names
    where the vocabulary has those. Literal special-token strings in text map to
    their ids (transformers' convention) unless tokenizer_config.json sets
    `split_special_tokens`, as our own byte-level folders do (`train_byte_bpe`).
    """

    def __init__(self, folder: str):
        from tokenizers import Tokenizer as FastTokenizer
        from tokenizers import decoders, normalizers, pre_tokenizers
        from tokenizers.models import WordPiece
        tj = os.path.join(folder, "tokenizer.json")
        if os.path.exists(tj):
            try:
                tok = FastTokenizer.from_file(tj)
            except Exception as e:  # noqa: BLE001 - the tokenizers library raises plain Exception
                raise ValueError(f"{tj}: not a readable tokenizer.json ({str(e)[:120]}): it is "
                                 "truncated or damaged; copy it again") from None
        else:
            vocab = os.path.join(folder, "vocab.txt")
            if not os.path.exists(vocab):
                raise FileNotFoundError(f"{folder}: expected tokenizer.json or vocab.txt")
            tok = FastTokenizer(WordPiece.from_file(vocab, unk_token="[UNK]"))
            tok.normalizer = normalizers.BertNormalizer(lowercase=True)
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tok.decoder = decoders.WordPiece()
        tok.no_truncation()
        tok.no_padding()
        tok.post_processor = None
        self.split_special_tokens = bool(
            _read_json(folder, "tokenizer_config.json").get("split_special_tokens", False))
        tok.encode_special_tokens = self.split_special_tokens
        self.tok = tok
        self.folder = folder
        spec = json.loads(tok.to_str())
        self.byte_level = any(_has_type(spec.get(k), "ByteLevel")
                              for k in ("pre_tokenizer", "decoder"))
        names = _special_token_names(folder, tok.token_to_id)
        ids = {role: tok.token_to_id(name) for role, name in names.items()}
        missing = [names[r] for r, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"{folder}: vocabulary lacks special tokens {missing}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            ids[r] for r in ROLES)

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts, num_threads: int = 0):
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_with_offsets(self, text):
        """Character spans; a byte-level 'Ġword' or a Metaspace '▁word' covers its space in
        `tokenizers`' offsets, which is trimmed here (the interface's contract). A
        character split over several byte pieces gives each of them its whole span."""
        enc = self.tok.encode(text, add_special_tokens=False)
        offsets = []
        for start, end in enc.offsets:
            while start < end and text[start].isspace():
                start += 1
            offsets.append((start, end))
        return list(enc.ids), offsets

    def decode(self, ids):
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def id_to_piece(self, i: int) -> str:
        return self.tok.id_to_token(i)

    def word_start_table(self) -> np.ndarray:
        """WordPiece marks continuations ('##'); Metaspace marks word starts ('\u2581');
        byte-level BPE writes the whitespace before a word into its piece ('Ġword',
        'Ċ', 'ĊĠĠ'), so a piece starts a word where its first byte is whitespace. Every
        other piece continues a word; special and added tokens start one."""
        vocab = self.tok.get_vocab()
        model = type(self.tok.model).__name__
        if model == "WordPiece":
            starts = {i: not p.startswith("##") for p, i in vocab.items()}
        elif self.byte_level:
            chars = byte_alphabet()
            space = {chars[b] for b in b" \t\n\r\x0b\x0c"}
            known = set(chars.values())
            starts = {i: not p or p[0] in space or p[0] not in known for p, i in vocab.items()}
        else:
            starts = {i: p.startswith(("\u2581", "\u0120")) for p, i in vocab.items()}
        size = self.vocab_size  # get_vocab_size() walks the vocabulary: once, not per entry
        table = np.ones(size, bool)
        for i, start in starts.items():
            if i < size:
                table[i] = start
        if self.byte_level:
            added = [i for i in self.tok.get_added_tokens_decoder() if i < size]
            table[added] = True
        table[list(self.special_ids)] = True
        return table

    def fingerprint(self) -> str:
        import hashlib
        text = self.tok.to_str() + ("\nsplit_special_tokens" if self.split_special_tokens else "")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def save(self, folder: str) -> str:
        """Writes folder/tokenizer.json (+ the role files); returns the path `load` takes."""
        os.makedirs(folder, exist_ok=True)
        self.tok.save(os.path.join(folder, "tokenizer.json"))
        names = {r: self.id_to_piece(getattr(self, f"{r}_id")) for r in ROLES}
        if self.split_special_tokens:
            _write_hf_configs(folder, names, split_special_tokens=True)
        else:
            with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
                json.dump({f"{r}_token": n for r, n in names.items()}, f, indent=1,
                          ensure_ascii=False)
        return folder


WordPieceTokenizer = HFTokenizer  # the name before RoBERTa/ModernBERT folders imported


def _has_type(spec, name: str) -> bool:
    """Whether a tokenizer.json component (or a Sequence of them) is of type name."""
    if isinstance(spec, dict):
        return spec.get("type") == name or any(_has_type(v, name) for v in spec.values()
                                               if isinstance(v, (dict, list)))
    if isinstance(spec, list):
        return any(_has_type(v, name) for v in spec)
    return False


def _read_json(folder: str, filename: str) -> dict:
    path = os.path.join(folder, filename)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        found = json.load(f)
    return found if isinstance(found, dict) else {}


# Where no file names a role: BERT's name, then RoBERTa's/GPT's, T5's and XLNet's.
ROLE_CANDIDATES = {"pad": ("[PAD]", "<pad>"), "unk": ("[UNK]", "<unk>"),
                   "cls": ("[CLS]", "<s>", "<cls>"), "sep": ("[SEP]", "</s>", "<sep>"),
                   "mask": ("[MASK]", "<mask>")}


def _special_token_names(folder: str, token_to_id: Callable | None = None) -> dict:
    """role -> token string from the folder's tokenizer_config / special_tokens_map, else
    the first of ROLE_CANDIDATES the vocabulary has (BERT's name when none)."""
    names, named = dict(zip(ROLES, SPECIAL_TOKENS)), set()
    for filename in ("special_tokens_map.json", "tokenizer_config.json"):
        found = _read_json(folder, filename)
        for role in names:
            value = found.get(f"{role}_token")
            if isinstance(value, dict):  # AddedToken as a dict
                value = value.get("content")
            if isinstance(value, str):
                names[role] = value
                named.add(role)
    if token_to_id is not None:
        for role in set(names) - named:
            present = [c for c in ROLE_CANDIDATES[role] if token_to_id(c) is not None]
            if present:
                names[role] = present[0]
    return names


def load(path: str) -> Tokenizer:
    """A tokenizer from what `train_tokenizer` or `Tokenizer.save` wrote, or a HuggingFace
    folder: a .model file -> sentencepiece; a folder with tokenizer.json or vocab.txt (or
    a tokenizer.json file) -> HFTokenizer; a folder holding only our sp.model -> that."""
    if os.path.isdir(path):
        has = lambda name: os.path.exists(os.path.join(path, name))  # noqa: E731
        if not has("tokenizer.json") and not has("vocab.txt") and has("sp.model"):
            return SentencePieceTokenizer(os.path.join(path, "sp.model"))
        return HFTokenizer(path)
    if os.path.basename(path) == "tokenizer.json" and os.path.isfile(path):
        return HFTokenizer(os.path.dirname(path) or ".")
    return SentencePieceTokenizer(path)
