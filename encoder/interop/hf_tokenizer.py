"""This codebase's tokenizers as HuggingFace fast tokenizers (tokenizer.json).

`AutoTokenizer.from_pretrained(DIR)` on the written folder gives exactly the
ids our tokenizer gives, with [CLS] a [SEP] (b [SEP]) and segment ids 0/1 as
`Tokenizer.encode_example` builds them.

A sentencepiece unigram model becomes a `tokenizers` Unigram model with the
same pieces and scores; a sentencepiece BPE model becomes a `tokenizers` BPE
model with the same pieces at the same ids and a merge list rebuilt from the
pieces' scores (`bpe_merges`). Both keep the same text normalisation: the model file's
precompiled character map (NFKC-style rules), sentencepiece's whitespace
handling (strip, collapse runs of spaces, a '▁' before every word). The
normaliser spec is read from the model file's protobuf bytes directly: the
`protobuf` package's runtime often disagrees with sentencepiece's generated
code, and three fields do not need it.

One difference is by design: HF tokenizers match the special-token strings
("[MASK]") in text, which the fill-mask pipeline relies on; our sentencepiece
tokenizer splits such strings into ordinary pieces (they are control symbols), and so
does a byte-level folder of ours (its tokenizer_config.json sets split_special_tokens,
which the folder written here does not).
Texts without those literal strings tokenize identically (tested).
"""
import json
import os

from encoder.data import tokenization, tokenizer as tokenizer_lib

SPECIAL_ROLES = {"pad_token": "pad_id", "unk_token": "unk_id", "cls_token": "cls_id",
                 "sep_token": "sep_id", "mask_token": "mask_id"}


def normalizer_spec(model_bytes: bytes) -> dict:
    """NormalizerSpec (ModelProto field 3): name, charsmap, dummy prefix, whitespace."""
    spec = {"name": "", "precompiled_charsmap": b"", "add_dummy_prefix": True,
            "remove_extra_whitespaces": True, "escape_whitespaces": True}
    names = {1: "name", 2: "precompiled_charsmap", 3: "add_dummy_prefix",
             4: "remove_extra_whitespaces", 5: "escape_whitespaces"}
    for number, _, value in tokenization.wire_fields(model_bytes):
        if number != 3:
            continue
        for n, _, v in tokenization.wire_fields(value):
            if n in names:
                key = names[n]
                spec[key] = v.decode() if key == "name" else (bool(v) if n >= 3 else v)
    return spec


def _model_type(model_bytes: bytes) -> int:
    """TrainerSpec.model_type (ModelProto field 2, its field 3): 1 unigram, 2 BPE."""
    for number, _, value in tokenization.wire_fields(model_bytes):
        if number == 2:
            for n, _, v in tokenization.wire_fields(value):
                if n == 3:
                    return v
    return 1  # the proto's default


def bpe_merges(pieces: list[tuple[str, float]], exclude=()) -> list[tuple[str, str]]:
    """The merge list of a sentencepiece BPE model, from its (piece, score) pairs.

    Sentencepiece's BPE encoder starts from characters and repeatedly joins the two
    adjacent symbols whose concatenation is a piece with the highest score (its
    trainer scores the i-th merged piece -i). A `tokenizers` BPE model does the same
    with merge ranks, so every split of a piece into two pieces becomes a merge at
    that piece's rank, best score first: the pair the trainer merged, and any other
    pair that would form the piece at encoding time (sentencepiece forms a piece from
    whichever two pieces meet). Pieces of one character are the alphabet, not merges;
    `exclude` (the special tokens) never take part.
    """
    index = {p: i for i, (p, _) in enumerate(pieces) if i not in exclude}
    order = sorted((i for i in index.values() if len(pieces[i][0]) > 1),
                   key=lambda i: (-pieces[i][1], i))
    merges = []
    for i in order:
        piece = pieces[i][0]
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece))]
        found = [(a, b) for a, b in splits if a in index and b in index]
        # the likely training-time pair first: both halves scored highest
        found.sort(key=lambda ab: max(index[ab[0]], index[ab[1]]))
        merges.extend(found)
    return merges


def from_sentencepiece(tok: "tokenizer_lib.SentencePieceTokenizer"):
    """A `tokenizers.Tokenizer` computing the same ids as the sentencepiece model."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE, Unigram
    with open(tok.path, "rb") as f:
        model_bytes = f.read()
    model_type = _model_type(model_bytes)
    if model_type not in (1, 2):
        raise ValueError(f"{tok.path}: sentencepiece model type {model_type} (word or char) "
                         "does not export to tokenizer.json; unigram (1) and BPE (2) do")
    spec = normalizer_spec(model_bytes)
    if not spec["escape_whitespaces"]:
        raise ValueError(f"{tok.path}: escape_whitespaces=false is not supported")
    sp = tok.sp
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    if model_type == 1:
        fast = Tokenizer(Unigram(vocab, unk_id=tok.unk_id, byte_fallback=False))
    else:
        # Sentencepiece BPE maps a run of characters outside the vocabulary to one [UNK]
        # (fuse_unk); the specials are control symbols, never merged.
        merges = bpe_merges(vocab, exclude=set(tok.special_ids))
        fast = Tokenizer(BPE({p: i for i, (p, _) in enumerate(vocab)}, merges,
                             unk_token=sp.id_to_piece(tok.unk_id), fuse_unk=True,
                             byte_fallback=False))
    steps = []
    if spec["precompiled_charsmap"]:
        steps.append(normalizers.Precompiled(spec["precompiled_charsmap"]))
    if spec["remove_extra_whitespaces"]:
        steps += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        fast.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spec["add_dummy_prefix"] else "never"
    # Sentencepiece's trainer splits at whitespace by default (split_by_whitespace), so no
    # piece spans two words and Metaspace may split the text into words first; a model
    # trained without that split has pieces with an inner '\u2581' and is encoded whole.
    split = not any("\u2581" in p[1:] for i, (p, _) in enumerate(vocab)
                    if i not in tok.special_ids)
    fast.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme,
                                                  split=split)
    fast.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    fast.add_special_tokens([AddedToken(sp.id_to_piece(i), special=True, normalized=False)
                             for i in tok.special_ids])
    return fast


def _with_template(fast, tok, pair_type: int = 1):
    """[CLS] a [SEP] / [CLS] a [SEP] b [SEP] with token types 0 / 1, as encode_example
    (pair_type 0 for a model without token types)."""
    from tokenizers import processors
    cls, sep = fast.id_to_token(tok.cls_id), fast.id_to_token(tok.sep_id)
    b = pair_type
    fast.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:{b} {sep}:{b}",
        special_tokens=[(cls, tok.cls_id), (sep, tok.sep_id)])
    return fast


def to_fast(tok, token_types: bool = True):
    """Any tokenizer of this codebase as a `tokenizers.Tokenizer` with the pair template."""
    if isinstance(tok, tokenizer_lib.SentencePieceTokenizer):
        fast = from_sentencepiece(tok)
    elif isinstance(tok, tokenizer_lib.HFTokenizer):
        from tokenizers import Tokenizer
        fast = Tokenizer.from_str(tok.tok.to_str())
    else:
        raise ValueError(f"cannot export a {type(tok).__name__} as tokenizer.json")
    return _with_template(fast, tok, 1 if token_types else 0)


def special_tokens(tok) -> dict:
    """{'cls_token': '[CLS]', ...} by role, as tokenizer_config.json names them."""
    return {role: tok.id_to_piece(getattr(tok, attr)) for role, attr in SPECIAL_ROLES.items()}


def write(tok, folder: str, max_length: int, token_types: bool = True) -> None:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json into folder.

    token_types=False: a model without token-type embeddings (ModernBERT, DeBERTa-v3)
    gets no token_type_ids from AutoTokenizer (its forward does not take them).
    """
    os.makedirs(folder, exist_ok=True)
    to_fast(tok, token_types).save(os.path.join(folder, "tokenizer.json"))
    specials = special_tokens(tok)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
              "padding_side": "right", "truncation_side": "right",
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]
              if token_types else ["input_ids", "attention_mask"],
              "clean_up_tokenization_spaces": False, **specials}
    for name, value in (("tokenizer_config.json", config),
                        ("special_tokens_map.json", specials)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(value, f, indent=1, ensure_ascii=False)
