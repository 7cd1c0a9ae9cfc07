"""Corpus preparation at scale: MB/s and peak memory of prepare per worker count, and a
training run's start-up on the prepared corpus (python -m encoder bench --mode=prepare)."""
import json
import time

from absl import flags

from benchmarks import EXPERIMENTS

flags.DEFINE_list("sizes_mb", ["25", "250", "2500"], "prepare: corpus sizes in MB")
flags.DEFINE_list("workers", ["1", "2"], "prepare: worker counts to time")
flags.DEFINE_string("bench_dir", "", "prepare: where corpora go (default: a temporary folder)")

FLAGS = flags.FLAGS


def _all_positive(kind):
    """A list flag's validator: each item a number of `kind` > 0, checked before any corpus
    is written (a size of -1 MB once ended in prepare's own traceback, a folder later)."""
    def check(values) -> bool:
        try:
            return all(kind(v) > 0 and kind(v) == float(v) for v in values)
        except ValueError:
            return False
    return check


flags.register_validator("sizes_mb", _all_positive(float), "each --sizes_mb a size in MB > 0")
flags.register_validator("workers", _all_positive(int), "each --workers a count >= 1")


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (Linux /proc)."""
    import os
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def _measure(cmd: list[str], until: str = "") -> dict:
    """Runs cmd; wall seconds, peak tree RSS, and seconds until a stdout line starts with until."""
    import subprocess
    import threading
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict = {}
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if until and "until" not in seen and line.startswith(until):
                seen["until"] = time.perf_counter() - t0
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.1)
    reader.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{''.join(lines[-30:])}")
    return {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_gb": round(peak / 2**30, 3),
            "until_s": round(seen["until"], 2) if "until" in seen else None}


def _write_corpus(folder: str, size_mb: float, docs: list[str], files: int = 8) -> int:
    import os
    os.makedirs(folder, exist_ok=True)
    target, written, copy = size_mb * 2**20, 0, 0
    handles = [open(f"{folder}/part-{k:02d}.txt", "w", encoding="utf-8") for k in range(files)]
    try:
        while written < target:
            for i, d in enumerate(docs):
                text = f"{d}\n(copy {copy})\n\n"
                handles[i % files].write(text)
                written += len(text.encode("utf-8"))
                if written >= target:
                    break
            copy += 1
    finally:
        for h in handles:
            h.close()
    return written


def run():
    import os
    import shutil
    import sys
    import tempfile
    from encoder.data import corpus, pipeline, shards, tokenizer as tokenizer_lib
    root = FLAGS.bench_dir or tempfile.mkdtemp(prefix="encoder-bench-")
    docs = corpus.stdlib_documents()
    tok_path = tokenizer_lib.train_sentencepiece(docs, f"{root}/sp", 8000)
    tok = tokenizer_lib.load(tok_path)
    py = sys.executable
    try:
        for size in map(float, FLAGS.sizes_mb):
            text = f"{root}/text-{size:g}"
            if not os.path.exists(text):
                _write_corpus(text, size, docs)
            mb = sum(os.path.getsize(f"{text}/{n}") for n in os.listdir(text)) / 2**20
            out = ""
            for w in map(int, FLAGS.workers):
                out = f"{root}/prepared-{size:g}-w{w}"
                shutil.rmtree(out, ignore_errors=True)
                m = _measure([py, "-m", "encoder", "prepare", f"--input={text}",
                              f"--out={out}", f"--tokenizer={tok_path}", f"--num_workers={w}"])
                print(json.dumps({"benchmark": "prepare", "corpus_mb": round(mb, 1),
                                  "workers": w, "seconds": m["seconds"],
                                  "mb_per_s": round(mb / m["seconds"], 2),
                                  "peak_rss_gb": m["peak_rss_gb"]}), flush=True)
            work = f"{root}/run-{size:g}"
            shutil.rmtree(work, ignore_errors=True)
            m = _measure([py, "-m", "encoder", "run", f"--config={EXPERIMENTS}/pretrain.py",
                          f"--workdir={work}", f"--config.data.train_files={out}",
                          "--config.train.num_steps=2", "--config.train.log_every=1",
                          "--config.train.eval_every=0", "--config.train.progress=false"],
                         until="step 1:")
            c = shards.PreparedCorpus(out)
            rows = shards.PackedRows(c, "train", 128, tok.cls_id, tok.sep_id, tok.pad_id)
            it = pipeline.batch_iterator(rows, 32, seed=0)
            t0 = time.perf_counter()
            n = sum(int(next(it)["attention_mask"].sum()) for _ in range(300))
            print(json.dumps({"benchmark": "train_start", "corpus_mb": round(mb, 1),
                              "train_rows": len(rows), "seconds_to_first_step": m["until_s"],
                              "peak_rss_gb": m["peak_rss_gb"],
                              "shuffled_read_tokens_per_s": round(n / (time.perf_counter() - t0))
                              }), flush=True)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if not FLAGS.bench_dir:
            shutil.rmtree(root, ignore_errors=True)
