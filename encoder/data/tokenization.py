"""What defines a tokenization, as comparable data: the pieces (with their scores and
kinds), the normalizer, the encoder's settings and the special ids, never where or when a
tokenizer was trained (a sentencepiece model file embeds its training paths, so two
separately trained, identical tokenizers differ byte for byte). `tokenization(tok)` is
the record, `tokenization_diff(a, b)` names the fields that differ; merge and init_from's
tokenizer check compare these (encoder/jobs/merge.py, encoder/checkpoints/sources.py).
"""
import hashlib
import json
import os


def wire_fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message, in order: varints as
    ints, length-delimited fields as bytes, fixed 32/64-bit fields as their raw bytes
    (sentencepiece's own sentencepiece_model_pb2 does not load under every protobuf
    runtime, so its model files are read here)."""
    i = 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n = varint()
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"not a sentencepiece model (protobuf wire type {wire})")
        yield number, wire, value


def _wire(buf: bytes) -> list[tuple[int, object]]:
    """(field number, value) pairs with fixed-width values decoded (float32 / double)."""
    import struct
    return [(n, struct.unpack("<f" if w == 5 else "<d", v)[0] if w in (1, 5) else v)
            for n, w, v in wire_fields(buf)]


def _spec(buf: bytes, fields: dict) -> dict:
    """The named fields of a sub-message (number -> (name, default)), defaults filled in."""
    found = dict(_wire(buf))
    out = {}
    for num, (name, default) in fields.items():
        v = found.get(num, default)
        out[name] = (hashlib.sha256(v).hexdigest()[:16] if name == "precompiled_charsmap"
                     else v.decode("utf-8") if isinstance(v, bytes) else v)
    return out


# sentencepiece_model.proto: what encoding reads (the normalizer's every field; of the
# trainer's, those the encoder reads at run time: the algorithm, byte fallback, how
# whitespace splits words, the unknown piece's surface and the special ids).
_NORMALIZER = {1: ("name", b""), 2: ("precompiled_charsmap", b""),
               3: ("add_dummy_prefix", 1), 4: ("remove_extra_whitespaces", 1),
               5: ("escape_whitespaces", 1), 6: ("normalization_rule_tsv", b"")}
_TRAINER = {3: ("model_type", 1), 35: ("byte_fallback", 0),
            24: ("treat_whitespace_as_suffix", 0), 26: ("allow_whitespace_only_pieces", 0),
            44: ("unk_surface", " \u2047 ".encode()), 40: ("unk_id", 0), 41: ("bos_id", 1),
            42: ("eos_id", 2), 43: ("pad_id", -1)}
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def _sentencepiece_tokenization(path: str) -> dict:
    with open(path, "rb") as f:
        fields = _wire(f.read())
    pieces, out = [], {"kind": "sentencepiece", "normalizer": _spec(b"", _NORMALIZER),
                       "denormalizer": None, "trainer": _spec(b"", _TRAINER)}
    for num, value in fields:
        if num == 1:
            p = dict(_wire(value))
            pieces.append((p.get(1, b"").decode("utf-8"), p.get(2, 0.0), p.get(3, 1)))
        elif num == 2:
            out["trainer"] = _spec(value, _TRAINER)
        elif num == 3:
            out["normalizer"] = _spec(value, _NORMALIZER)
        elif num == 5:
            out["denormalizer"] = _spec(value, _NORMALIZER)
    t = out["trainer"]
    t["model_type"] = _MODEL_TYPES.get(t["model_type"], t["model_type"])
    for k in ("unk_id", "bos_id", "eos_id", "pad_id"):  # int32 varints: -1 is 2^64 - 1
        t[k] = t[k] - (1 << 64) if t[k] >= 1 << 63 else t[k]
    out["pieces"] = pieces
    return out


_HF_PARTS = ("model", "normalizer", "pre_tokenizer", "post_processor", "decoder",
             "added_tokens")


def tokenization(tok) -> dict:
    """What defines how `tok` turns text into ids, as comparable data: the pieces (and
    their scores and kinds), the normalizer and the encoder's settings, the special ids;
    never where or when it was trained."""
    roles = {r: int(getattr(tok, f"{r}_id")) for r in ("pad", "unk", "cls", "sep", "mask")}
    out = {"special ids": roles, "vocab_size": int(tok.vocab_size)}
    path = getattr(tok, "path", "")
    if path and os.path.isfile(path) and hasattr(tok, "sp"):
        return {**out, **_sentencepiece_tokenization(path)}
    if hasattr(tok, "tok") and hasattr(tok.tok, "to_str"):
        spec = json.loads(tok.tok.to_str())
        return {**out, "kind": "tokenizer.json",
                **{part: spec.get(part) for part in _HF_PARTS},
                "split_special_tokens": bool(getattr(tok, "split_special_tokens", False))}
    return {**out, "kind": type(tok).__name__, "fingerprint": tok.fingerprint()}


def _short(v, limit: int = 60) -> str:
    text = json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _first_difference(a: list, b: list, what: str) -> str:
    if len(a) != len(b):
        return f"{what}: {len(a)} vs {len(b)}"
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"{what}: entry {i} is {_short(a[i])} vs {_short(b[i])}"


def tokenization_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """'field: a vs b' for each field of two tokenization() records that differs."""
    out = []
    for k in [k for k in dict.fromkeys(list(a) + list(b))]:
        x, y = a.get(k, "<absent>"), b.get(k, "<absent>")
        if x == y:
            continue
        name = f"{prefix}{k}"
        if isinstance(x, dict) and isinstance(y, dict):
            out += tokenization_diff(x, y, name + ".")
        elif isinstance(x, list) and isinstance(y, list):
            out.append(_first_difference(x, y, name))
        else:
            out.append(f"{name}: {_short(x)} vs {_short(y)}")
    return out
