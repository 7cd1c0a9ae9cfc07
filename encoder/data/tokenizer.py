"""Tokenizers: one small interface over sentencepiece and WordPiece vocabularies.

Our sentencepiece models reserve fixed ids for the special tokens:
[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. They are control symbols, so
normal text never produces them (the string "[MASK]" in text is split into
ordinary pieces). An imported HuggingFace checkpoint brings its own WordPiece
vocabulary (through the `tokenizers` library) behind the same interface.

`word_start_table()` marks, for every vocabulary id, whether the piece starts
a word; whole-word and span masking read it on device.
"""
import abc
import os
import tempfile
from typing import Iterable, Sequence

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)


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


def train_sentencepiece(texts: Iterable[str], model_prefix: str, vocab_size: int,
                        model_type: str = "unigram", max_chars: int = 4_000_000) -> str:
    """Trains a sentencepiece model on texts; returns the .model path.

    Writes at most max_chars of text to a temporary file first (sentencepiece
    samples sentences anyway; this bounds memory and time on large corpora).
    """
    import sentencepiece as spm
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"Unknown tokenizer type {model_type!r}; valid names: bpe, unigram")
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


class HFTokenizer(Tokenizer):
    """A HuggingFace tokenizer folder (tokenizer.json, or a BERT vocab.txt).

    The special tokens are found by role in tokenizer_config.json /
    special_tokens_map.json (RoBERTa's <s> </s> <pad> <mask>, ModernBERT's,
    DeBERTa's [CLS] ...), else by BERT's names.
    """

    def __init__(self, folder: str):
        from tokenizers import Tokenizer as FastTokenizer
        from tokenizers import decoders, normalizers, pre_tokenizers
        from tokenizers.models import WordPiece
        tj = os.path.join(folder, "tokenizer.json")
        if os.path.exists(tj):
            tok = FastTokenizer.from_file(tj)
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
        self.tok = tok
        self.folder = folder
        names = _special_token_names(folder)
        ids = {role: tok.token_to_id(name) for role, name in names.items()}
        missing = [names[r] for r, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"{folder}: vocabulary lacks special tokens {missing}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            ids[r] for r in ("pad", "unk", "cls", "sep", "mask"))

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts, num_threads: int = 0):
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_with_offsets(self, text):
        enc = self.tok.encode(text, add_special_tokens=False)
        return list(enc.ids), [tuple(o) for o in enc.offsets]

    def decode(self, ids):
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def id_to_piece(self, i: int) -> str:
        return self.tok.id_to_token(i)

    def word_start_table(self) -> np.ndarray:
        """WordPiece marks continuations ('##'); Metaspace and byte-level BPE mark word
        starts ('\u2581', '\u0120'), the rest of their pieces continue a word."""
        vocab = self.tok.get_vocab()
        model = type(self.tok.model).__name__
        if model == "WordPiece":
            starts = {i: not p.startswith("##") for p, i in vocab.items()}
        else:
            starts = {i: p.startswith(("\u2581", "\u0120")) for p, i in vocab.items()}
        size = self.vocab_size  # get_vocab_size() walks the vocabulary: once, not per entry
        table = np.ones(size, bool)
        for i, start in starts.items():
            if i < size:
                table[i] = start
        table[list(self.special_ids)] = True
        return table

    def fingerprint(self) -> str:
        import hashlib
        return hashlib.sha256(self.tok.to_str().encode()).hexdigest()[:16]

    def save(self, folder: str) -> str:
        """Writes folder/tokenizer.json; returns the path `load` takes (the folder)."""
        import json
        os.makedirs(folder, exist_ok=True)
        self.tok.save(os.path.join(folder, "tokenizer.json"))
        roles = {f"{r}_token": self.id_to_piece(getattr(self, f"{r}_id"))
                 for r in ("pad", "unk", "cls", "sep", "mask")}
        with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
            json.dump(roles, f, indent=1, ensure_ascii=False)
        return folder


WordPieceTokenizer = HFTokenizer  # the name before RoBERTa/ModernBERT folders imported


def _special_token_names(folder: str) -> dict:
    """role -> token string from the folder's tokenizer_config / special_tokens_map."""
    import json
    names = dict(zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS))
    for filename in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(folder, filename)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            found = json.load(f)
        for role in names:
            value = found.get(f"{role}_token")
            if isinstance(value, dict):  # AddedToken as a dict
                value = value.get("content")
            if isinstance(value, str):
                names[role] = value
    return names


def load(path: str) -> Tokenizer:
    """A .model file -> sentencepiece; a folder -> a HuggingFace tokenizer."""
    if os.path.isdir(path):
        return HFTokenizer(path)
    return SentencePieceTokenizer(path)
