"""A pretraining run's data order, rebuilt from its workdir: which source, shard and record
made each row of a step (as Ettin publishes its batches).

    python -m encoder data --workdir=W --step=N [--out=FILE.jsonl]

Nothing is logged while the run trains: the order is a pure function of what the workdir
already holds. WORKDIR/config.json gives the seed and the phases, so the step's phase,
its data stream, the stream's seed and the stream rows the step read (every process's:
the global batch); WORKDIR/data_order.json, written when the run opened its data
(encoder/data/pipeline.py), names the prepared folder of each source a stream reads. A
mixture's rows are then drawn again (encoder/data/mixture.py: the source of each row, the
rows drawn from each source before it, its epoch and place in that epoch's order); a
single source's through the same grain shuffle the run read (pipeline.dataset). Each
row is named by its source, epoch, row of the source's packed rows, and the shard files
and records (documents) it holds a part of.

Step N is the step metrics.jsonl calls N (the N-th batch read, 1-based).
"""
import json
import os

import ml_collections
import numpy as np

from encoder.data import mixture, pipeline, shards, tokenizer as tokenizer_lib
from encoder.train import phases as phases_lib


class DataOrderError(ValueError):
    """The workdir cannot say which rows a step read (named: what is missing)."""


def load_config(workdir: str):
    path = os.path.join(workdir, "config.json")
    try:
        with open(path) as f:
            return ml_collections.ConfigDict(json.load(f))
    except FileNotFoundError:
        raise DataOrderError(f"{workdir}: no config.json; is it a pretraining run's "
                             "workdir?") from None


def stream_rows_before(plan, step0: int) -> int:
    """Rows the stream of 0-based global step `step0` read before it (its earlier phases'
    and this phase's earlier steps, batch-size warmup counted)."""
    phase = plan.phase_at(step0)
    total = 0
    for ph in plan.phases:
        if ph.stream != phase.stream or ph.start >= step0:
            continue
        n = min(ph.end, step0) - ph.start
        warm = ph.warmup_rows[:n]
        total += sum(warm) + max(0, n - len(warm)) * int(ph.config.train.batch_size)
    return total


def _stream(workdir: str, phase) -> dict:
    record = pipeline.read_data_order(workdir)
    key = pipeline.reading_key(phase.config.data)
    if record is None or key not in record.get("streams", {}):
        raise DataOrderError(
            f"{workdir}: no record of the data phase {phase.name!r} read "
            f"({pipeline.DATA_ORDER} {'has no entry for it' if record else 'is missing'}): "
            "the run never opened that phase's data, or ran before the data order was "
            "recorded")
    return record["streams"][key]


def _rows_source(entry: dict, src: dict):
    c = shards.PreparedCorpus(src["folder"])
    tok = tokenizer_lib.load(c.tokenizer_path)
    rows = shards.PackedRows(c, src.get("split", "train"), entry["seq_len"], tok.cls_id,
                             tok.sep_id, tok.pad_id, entry.get("restart_positions", False))
    if len(rows) != src["rows"]:
        raise DataOrderError(f"{src['folder']}: {len(rows):,} rows now, the run read "
                             f"{src['rows']:,}: the prepared folder changed since")
    return rows, tok


def _drawn(entry: dict, seed: int, start: int, size: int) -> list[tuple[int, int, int]]:
    """(source index, epoch, source row) of stream rows start .. start+size-1."""
    sources = entry["sources"]
    if entry["kind"] == "rows":  # one source, read through the grain shuffle
        n = sources[0]["rows"]
        ds = pipeline.index_order(n, seed)
        return [(0, r // n, int(ds[r])) for r in range(start, start + size)]
    probs = np.array([s["probability"] for s in sources], np.float64)
    counts = mixture.counts_at(seed, probs, start)
    src = mixture.sources_of(seed, mixture.cumulative(probs), start, size)
    k = mixture.draws(src, counts)
    out = [None] * size
    for s in np.unique(src):
        at = np.flatnonzero(src == s)
        epoch, rows = mixture.locate(seed, sources[s]["name"], k[at], sources[s]["rows"])
        for i, e, r in zip(at, epoch, rows):
            out[i] = (int(s), int(e), int(r))
    return out


def step_rows(workdir: str, step: int, text_chars: int = 80) -> tuple[dict, list[dict]]:
    """(what the step was, one dict per row of its global batch)."""
    config = load_config(workdir)
    plan = phases_lib.plan(config)
    if not 1 <= step <= plan.total_steps:
        raise DataOrderError(f"--step={step}: the run has steps 1..{plan.total_steps}")
    phase = plan.phase_at(step - 1)
    seed = phases_lib.stream_seed(int(config.seed), phase)
    start = stream_rows_before(plan, step - 1)
    size = phase.rows(step - 1)
    entry = _stream(workdir, phase)
    opened = [_rows_source(entry, s) for s in entry["sources"]]
    rows = []
    for j, (s, epoch, r) in enumerate(_drawn(entry, seed, start, size)):
        packed, tok = opened[s]
        row = {"step": step, "row": j, "source": entry["sources"][s]["name"],
               "epoch": epoch, "source_row": r,
               "records": [[f, d] for f, d in packed.records_of(r)],
               "folder": entry["sources"][s]["folder"]}
        if text_chars:
            ids = packed[r]["input_ids"][1:]
            ids = ids[packed[r]["attention_mask"][1:].astype(bool)]
            row["text"] = tok.decode([int(i) for i in ids])[:text_chars]
        rows.append(row)
    shares: dict = {}
    for row in rows:
        shares[row["source"]] = shares.get(row["source"], 0) + 1
    header = {"step": step, "phase": phase.name, "stream_rows": [start, start + size],
              "seed": seed, "kind": entry["kind"], "rows": shares}
    return header, rows


def describe(header: dict, rows: list[dict]) -> list[str]:
    """The step as console lines: a header, then one line a row."""
    lo, hi = header["stream_rows"]
    out = [f"step {header['step']} (phase {header['phase']!r}; stream rows {lo:,}..{hi - 1:,}, "
           f"seed {header['seed']}): {len(rows)} rows: "
           + ", ".join(f"{k} {v}" for k, v in header["rows"].items())]
    for r in rows:
        records = ", ".join(f"{os.path.basename(f)}#{d}" for f, d in r["records"])
        text = f"  {json.dumps(r['text'])}" if "text" in r else ""
        out.append(f"  {r['row']:>4}  {r['source']}  epoch {r['epoch']}  row {r['source_row']}"
                   f"  {records}{text}")
    return out


def write(rows: list[dict], path: str) -> None:
    """One JSON line a row (atomic)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)
