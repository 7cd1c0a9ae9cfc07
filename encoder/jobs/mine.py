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

--scores makes the model a teacher: each row is {"text_a", "passages": [positive,
negatives...], "scores": [...]}, a score per passage that the distillation losses read
(contrastive.loss=margin_mse|kl). A score is the model's own logit, scale x similarity:
scale its run's 1 / contrastive.temperature (or its learned scale, clamped at 100, as the
ranking loss reads it), similarity the cosine of the vectors mined with or, for a ColBERT
run, the MaxSim of its token vectors.
--out is a new file, an empty one or an earlier mining output, never an input, a folder or
another file; every option and input is checked before the model is read.
"""
import json
import math
import os
import tempfile

import jax

from encoder import errors
from encoder.checkpoints import sources
from encoder.eval import embeddings
from encoder.retrieval import beir, colbert, losses, mining, options as options_lib
from encoder.tasks import files
from encoder.train import partitioning


def read_pairs(path: str) -> list[dict]:
    """{"text_a", "text_b"} rows (file:line errors for a missing field)."""
    return files.read_jsonl(path, (("text_a", "text_b"),), lambda ex, where: None)


def encoder_of(init_from: str, pooling: str = "", max_len: int = 128, batch_size: int = 64,
               source: bool = False):
    """(encode(texts) -> [N, D] unit vectors, pooling) for a start source, sharded (and the
    source itself as a third value when asked)."""
    src = sources.load(init_from)
    positions = int(src.model_cfg.max_position)
    if max_len > positions:  # relative positions compute past it; memory is what ends it
        raise errors.UsageError(f"--max_len={max_len} is past the {positions} positions "
                                f"{init_from} was built for (model.max_position): give "
                                f"--max_len={positions} or less")
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
    return (encode, pooling, src) if source else (encode, pooling)


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
                return isinstance(row, dict) and ({"text_a", "text_b", "negatives"} <= set(row)
                                                  or {"text_a", "passages", "scores"} <= set(row))
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


def _write(out: str, pairs: list, negatives: list, scores: list | None = None) -> None:
    """The triples into a fresh hidden sibling, renamed over --out once complete (a stopped
    or failed write leaves --out as it was and no scratch file)."""
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            for i, (p, negs) in enumerate(zip(pairs, negatives)):
                row = ({"text_a": p["text_a"], "text_b": p["text_b"], "negatives": negs}
                       if scores is None else
                       {"text_a": p["text_a"], "passages": [p["text_b"]] + negs,
                        "scores": [round(x, 6) for x in scores[i]]})
                f.write(json.dumps(row) + "\n")
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def teacher_scale(src) -> float:
    """The source's inverse temperature as its ranking loss used it (losses.scale_of)."""
    o = options_lib.of_run(src.run_config)
    log_scale = src.params.get("logit_scale") if isinstance(src.params, dict) else None
    return float(losses.scale_of(log_scale, o.temperature))


def colbert_similarities(src, pairs: list, negatives: list, query_prefix: str,
                         passage_prefix: str, pooling: str, max_len: int) -> list:
    """MaxSim of each pair's query with its positive and each negative (a ColBERT run)."""
    from encoder.retrieval import retriever
    view = retriever.of_source(src, pooling, max_len)
    qv, qm = view.tokens([p["text_a"] for p in pairs], query_prefix)
    passages = [[p["text_b"]] + n for p, n in zip(pairs, negatives)]
    dv, dm = view.tokens([t for row in passages for t in row], passage_prefix)
    out, at = [], 0
    for i, row in enumerate(passages):
        out.append([colbert.maxsim_numpy(qv[i], qm[i], dv[at + j], dm[at + j])
                    for j in range(len(row))])
        at += len(row)
    return out


def _check_finite(filters: dict) -> None:
    """A NaN margin or score bound compares False with every score: it would filter nothing
    and the run would look filtered."""
    for name, value in filters.items():
        if value is not None and not math.isfinite(float(value)):
            raise errors.UsageError(f"--{name}={value}: expected a finite number (NaN or "
                                    "infinity filters nothing)")


def _check_range(range_min: int, corpus_size: int, where: str) -> None:
    """--range_min skips the top candidates of a corpus: past its size it skips them all,
    and the output would hold pairs without a negative."""
    if range_min >= corpus_size - 1:  # one of them is the pair's own positive
        raise errors.UsageError(
            f"--range_min={range_min} skips every candidate: {where} holds {corpus_size} "
            f"passage(s), one of them each pair's positive; give --range_min below "
            f"{max(corpus_size - 1, 0)} (or a larger --corpus)")


def mine_file(init_from: str, pairs_path: str, out: str, corpus_path: str = "",
              num_negatives: int = 5, pooling: str = "", max_len: int = 128,
              query_prefix: str = "", passage_prefix: str = "", scores: bool = False,
              **filters) -> dict:
    # Everything that can be refused is, before the model is loaded or a text embedded.
    mining.candidates(num_negatives, filters.get("range_min", 0), filters.get("range_max", 0))
    _check_finite(filters)
    _check_input("--pairs", pairs_path)
    if corpus_path:
        _check_input("--corpus", corpus_path)
    check_out(out, {"--pairs": pairs_path, "--corpus": corpus_path})
    pairs = read_pairs(pairs_path)
    if corpus_path:
        try:
            docs, skipped = beir._read_jsonl(corpus_path, ("_id", "text"))
        except UnicodeDecodeError as e:
            raise errors.UsageError(f"--corpus={corpus_path} is not UTF-8 text ({e.reason} "
                                    f"at byte {e.start}): a BEIR corpus.jsonl is expected"
                                    ) from None
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
    _check_range(filters.get("range_min", 0), len(corpus), corpus_path or pairs_path)
    # A titled BEIR document reads "title text" while a pair's text_b is the text alone
    # (api_retrieval's train.jsonl): the positive is found by either, at every row holding it.
    rows_of: dict = {}
    for i, keys in enumerate(zip(corpus, bodies)):
        for key in set(keys):
            rows_of.setdefault(key, []).append(i)
    encode, pooling, src = encoder_of(init_from, pooling, max_len, source=True)
    q = encode([query_prefix + p["text_a"] for p in pairs])
    pos = encode([passage_prefix + p["text_b"] for p in pairs])
    docs_vecs = encode([passage_prefix + t for t in corpus])
    negatives, stats, sims = mining.mine(q, pos, docs_vecs, corpus, pairs,
                                         [rows_of.get(p["text_b"], []) for p in pairs],
                                         num_negatives, with_scores=True, **filters)
    logits = None
    if scores:
        head = options_lib.of_run(src.run_config).head
        if head == "colbert":
            sims = colbert_similarities(src, pairs, negatives, query_prefix, passage_prefix,
                                        pooling, max_len)
        scale = teacher_scale(src)
        logits = [[scale * x for x in row] for row in sims]
        stats.update(teacher_scale=scale, teacher_head=head)
    if jax.process_index() == 0:
        _write(out, pairs, negatives, logits)
    stats.update(out=out, corpus=len(corpus), corpus_lines_skipped=skipped, pooling=pooling,
                 negatives=int(sum(len(n) for n in negatives)))
    return stats

