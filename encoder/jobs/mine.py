"""The mining job: hard negatives for a pairs file, mined by a model.

    python -m encoder mine --init_from=MODEL --pairs=PAIRS.jsonl \\
        [--corpus=CORPUS.jsonl] --out=TRIPLES.jsonl [--num_negatives=K] \\
        [--relative_margin=0.05] [--absolute_margin=M] [--max_score=S] [--range_min=R]

MODEL is anything `init_from` takes (a workdir of this codebase, a params folder,
hf:DIR). The corpus is a BEIR corpus.jsonl ("title text" per document) or, without
one, the pairs' own distinct text_b. Texts are embedded with the model's pooling
(the run's, else --pooling) and prefixes, sharded over every device; the exact
top-k and the filters are encoder/retrieval/mining.py's. Writes one JSON line per
pair, {"text_a", "text_b", "negatives": [...]}, which the contrastive task trains
on as it is, and prints the counts (rows, negatives, drops by reason) as JSON.
--out is a new file, an empty one or an earlier mining output, never an input, a folder or
another file; every option and input is checked before the model is read.
"""
import json
import os
import tempfile

import jax

from encoder import errors
from encoder.checkpoints import sources
from encoder.eval import embeddings
from encoder.retrieval import beir, mining
from encoder.tasks import files
from encoder.train import partitioning


def read_pairs(path: str) -> list[dict]:
    """{"text_a", "text_b"} rows (file:line errors for a missing field)."""
    return files.read_jsonl(path, (("text_a", "text_b"),), lambda ex, where: None)


def encoder_of(init_from: str, pooling: str = "", max_len: int = 128, batch_size: int = 64):
    """(encode(texts) -> [N, D] unit vectors, pooling) for a start source, sharded."""
    src = sources.load(init_from)
    run = src.run_config
    pooling = pooling or (run.get("pooling", "mean") if run is not None else "mean")
    mesh = partitioning.make_mesh({"data": -1, "fsdp": 1})
    n = mesh.devices.size
    batch_size = -(-batch_size // n) * n
    shard = lambda b: partitioning.shard_batch(b, mesh)  # noqa: E731
    # the parameters on the batch's mesh (replicated): a jit refuses operands committed to
    # different device sets (one device's params with an 8-device batch)
    params = jax.device_put(src.params, partitioning.replicated(mesh))

    def encode(texts):
        return embeddings.embed_texts(src.model_cfg, params, src.tokenizer, list(texts),
                                      pooling, max_len, batch_size, shard)
    return encode, pooling


def _is_mined(path: str) -> bool:
    """The file is empty or this command's output (its first row has text_a, text_b and
    negatives)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    return False
                return isinstance(row, dict) and {"text_a", "text_b", "negatives"} <= set(row)
    return True


def check_out(out: str, inputs: dict) -> None:
    """--out is a new file, an empty one or an earlier mining output, never a folder, an
    input or somebody's other file; refused before anything is read or written."""
    for flag, path in inputs.items():
        if path and os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path):
            raise errors.NotOurs(f"--out={out} is the {flag} input: nothing was written; "
                                 "write the triples to another file")
    if os.path.isdir(out):
        raise errors.NotOurs(f"--out={out} is a folder; --out is the JSONL file to write "
                             f"(e.g. {os.path.join(out, 'triples.jsonl')})")
    if os.path.exists(out) and not _is_mined(out):
        raise errors.NotOurs(f"--out={out} is a file this command did not write (its first "
                             "row is not {text_a, text_b, negatives}); nothing was written: "
                             "choose a new file")
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise errors.NotOurs(f"--out={out}: {parent} is a file, not a folder")


def _check_input(flag: str, path: str) -> None:
    if not os.path.isfile(path):
        what = "a folder, not a file" if os.path.isdir(path) else "no such file"
        raise errors.UsageError(f"{flag}={path}: {what}")


def _write(out: str, pairs: list, negatives: list) -> None:
    """The triples into a fresh hidden sibling, renamed over --out once complete (a stopped
    or failed write leaves --out as it was and no scratch file)."""
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            for p, negs in zip(pairs, negatives):
                f.write(json.dumps({"text_a": p["text_a"], "text_b": p["text_b"],
                                    "negatives": negs}) + "\n")
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def mine_file(init_from: str, pairs_path: str, out: str, corpus_path: str = "",
              num_negatives: int = 5, pooling: str = "", max_len: int = 128,
              query_prefix: str = "", passage_prefix: str = "", **filters) -> dict:
    # Everything that can be refused is, before the model is loaded or a text embedded.
    mining.candidates(num_negatives, filters.get("range_min", 0), filters.get("range_max", 0))
    _check_input("--pairs", pairs_path)
    if corpus_path:
        _check_input("--corpus", corpus_path)
    check_out(out, {"--pairs": pairs_path, "--corpus": corpus_path})
    pairs = read_pairs(pairs_path)
    if corpus_path:
        docs, skipped = beir._read_jsonl(corpus_path, ("_id", "text"))
        if not docs:
            raise errors.UsageError(
                f"--corpus={corpus_path}: no document to mine from ({skipped} lines skipped: "
                "a BEIR corpus.jsonl line is {\"_id\": ..., \"title\": ..., \"text\": ...}, "
                "_id and text strings)")
        corpus = [beir.document_text(d) for d in docs]
        bodies = [d["text"] for d in docs]
    else:
        corpus, skipped = sorted({p["text_b"] for p in pairs}), 0
        bodies = corpus
    # A titled BEIR document reads "title text" while a pair's text_b is the text alone
    # (api_retrieval's train.jsonl): the positive is found by either, at every row holding it.
    rows_of: dict = {}
    for i, keys in enumerate(zip(corpus, bodies)):
        for key in set(keys):
            rows_of.setdefault(key, []).append(i)
    encode, pooling = encoder_of(init_from, pooling, max_len)
    q = encode([query_prefix + p["text_a"] for p in pairs])
    pos = encode([passage_prefix + p["text_b"] for p in pairs])
    docs_vecs = encode([passage_prefix + t for t in corpus])
    negatives, stats = mining.mine(q, pos, docs_vecs, corpus, pairs,
                                   [rows_of.get(p["text_b"], []) for p in pairs],
                                   num_negatives, **filters)
    if jax.process_index() == 0:
        _write(out, pairs, negatives)
    stats.update(out=out, corpus=len(corpus), corpus_lines_skipped=skipped, pooling=pooling,
                 negatives=int(sum(len(n) for n in negatives)))
    return stats

