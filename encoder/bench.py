"""Benchmarks that print JSON lines (one per implementation), never asserted in tests.

Train step (default):
    python -m encoder.bench --size=mini --seq_len=128 --batch_size=32 [--objective=mlm] [--against=hf]

  Times this codebase's jit-compiled train step and, with --against=hf,
  HuggingFace transformers' FlaxBertForMaskedLM at the identical configuration
  (same parameter count, asserted), the same masked-LM loss on the same masked
  positions and the same optax AdamW update, in the same process. Each line:
  parameters, compile seconds, median step seconds over --steps timed steps
  after --warmup, tokens/s, model FLOPs per step, achieved FLOP/s as a
  fraction of the device's peak, and the compiled program's memory; the HF
  line adds `speedup` (ours / HF tokens per second).

  FLOPs per step = 3 x forward FLOPs (encoder.train.flops): per token and
  layer 8D^2 + 4TD + 4DF, plus the vocabulary projection 2(DE + EV) for every
  position the implementation computes logits at (the masked slots for this
  codebase, all T positions for HF's model).

  With --config=experiments/NAME.py[:arg] the step runs that experiment's model and
  data layout (packed documents, restarted positions) instead of a --size preset.

On a GPU, the whole accelerator benchmark in one call:
    python -m encoder.bench --mode=device [--steps=10]

  BERT-base MLM in bf16 at T=128 and 512 and the ModernBERT-like recipe at T=8,192
  (packed rows), with every attention backend that serves it (DEVICE_PLAN), one
  subprocess each: tokens/s, MFU and memory per row.

Input pipeline:
    python -m encoder.bench --mode=pipeline [--seq_len=128]

  tokens/s of prepare (tokenize into shards) and of reading packed, shuffled
  batches back from them, on the embedded corpus, each as a multiple of the
  tiny model's train-step tokens/s here.

Ahead-of-time sizing (no parameter is allocated, nothing runs):
    python -m encoder.bench --mode=compile --config=experiments/bert_base.py[:arg]
        [--seq_len=512] [--batch_size=64] [--devices=8] [--dtype=bfloat16]
        [--scan_layers=auto|true|false] [--remat=...] [--config.mesh.fsdp=8 ...]

  Lowers and compiles the pretraining train step for the target shapes on CPU
  (--devices simulates N CPU devices for the config's mesh) and prints, per
  device: parameter and optimizer-state bytes (their shards), the executable's
  temp (activation) bytes and peak from memory_analysis(), compile seconds, and
  the FLOPs XLA counts (cost_analysis(); a scanned stack's loop body is counted
  once, so 1- and 2-layer probes give the whole step's count) vs the analytic
  count of encoder.train.flops.

Corpus preparation at scale:
    python -m encoder.bench --mode=prepare [--sizes_mb=25,250,2500] [--workers=1,2]
        [--bench_dir=DIR]

  Builds text corpora of each size by repeating the embedded corpus (each
  copy's documents marked, so they are distinct), then for each: prepare's
  MB/s and peak resident memory (the whole process tree) with each worker
  count, a training run's peak memory and seconds to its first step on the
  prepared corpus, and batches/s read back from it. Runs subprocesses; the
  corpora stay in --bench_dir (default: a temporary folder, removed).
"""
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from ml_collections import config_flags


def define_flags():
    """The command line's flags, defined only when this module runs as the program: its
    functions are also a library (tests, encoder.ablate), and absl allows one `--config`
    per process."""
    flags.DEFINE_enum("mode", "step", ["step", "pipeline", "prepare", "compile", "device"],
                      "what to benchmark")
    config_flags.DEFINE_config_file(
        "config", None, "step / compile: an experiment file[:arg] (step: instead of --size)",
        lock_config=True)
    flags.DEFINE_integer("devices", 0, "compile: simulated CPU devices (0: those present)",
                         lower_bound=0)
    flags.DEFINE_enum("scan_layers", "", ["", "auto", "true", "false"],
                      "override model.scan_layers")
    flags.DEFINE_bool("unrolled_flops", True, "compile: with a scanned stack, also compile 1- and "
                      "2-layer probes to count the whole step's XLA FLOPs")
    flags.DEFINE_list("sizes_mb", ["25", "250", "2500"], "prepare: corpus sizes in MB")
    flags.DEFINE_list("workers", ["1", "2"], "prepare: worker counts to time")
    flags.DEFINE_string("bench_dir", "", "prepare: where corpora go (default: a temporary folder)")
    flags.DEFINE_string("size", "mini", "model size preset")
    flags.DEFINE_integer("seq_len", 128, "tokens per row", lower_bound=1)
    flags.DEFINE_integer("batch_size", 32, "rows per step", lower_bound=1)
    flags.DEFINE_integer("vocab_size", 32768, "vocabulary size", lower_bound=6)
    flags.DEFINE_enum("objective", "mlm", ["mlm", "rtd"], "pretraining objective")
    flags.DEFINE_string("dtype", "", "compute dtype (default: bfloat16 on GPU/TPU, float32 on CPU)")
    flags.DEFINE_string("attention_impl", "auto", "auto | xla | cudnn | reference | splash | "
                        "pallas_gpu (encoder.model.attention.ATTENTION_BACKENDS)")
    flags.DEFINE_string("remat", "none", "rematerialisation policy")
    flags.DEFINE_enum("against", "", ["", "hf"], "reference implementation to compare with")
    flags.DEFINE_integer("steps", 20, "timed steps", lower_bound=1)
    flags.DEFINE_integer("warmup", 3, "untimed steps after compilation", lower_bound=1)


FLAGS = flags.FLAGS


def bench_config():
    from encoder import config as config_lib
    config = config_lib.base_config()
    config_lib.OPTIONS["size"](config, FLAGS.size)
    config.objective = FLAGS.objective
    config.model.vocab_size = FLAGS.vocab_size
    config.model.dropout = config.model.attention_dropout = 0.0
    config.model.dtype = FLAGS.dtype or ("float32" if jax.default_backend() == "cpu"
                                         else "bfloat16")
    config.model.attention_impl = FLAGS.attention_impl
    config.model.remat = FLAGS.remat
    config.data.seq_len = FLAGS.seq_len
    config.data.document_mask = False
    config.train.batch_size = FLAGS.batch_size
    config.train.num_steps = 1000
    config.mesh.data, config.mesh.fsdp = -1, 1
    from encoder.train import pretrain
    pretrain.validate(config)
    return config


def random_batch(config, seed=0, documents: int = 4):
    """Random full rows; with data.document_mask, each row packs `documents` equal
    documents (document ids, positions restarting when data.restart_positions), so the
    attention backends see what packed pretraining gives them."""
    rng = np.random.default_rng(seed)
    b, t = config.train.batch_size, config.data.seq_len
    ids = rng.integers(5, config.model.vocab_size, size=(b, t)).astype(np.int32)
    ids[:, 0] = 2
    positions = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy()
    batch = {"input_ids": ids, "attention_mask": np.ones((b, t), np.int32),
             "segment_ids": np.zeros((b, t), np.int32), "positions": positions}
    if config.data.get("document_mask", False):
        doc = np.minimum(np.arange(t) * documents // t, documents - 1).astype(np.int32)
        batch["document_ids"] = np.broadcast_to(doc + 1, (b, t)).copy()
        if config.data.get("restart_positions", False):
            starts = np.searchsorted(doc, np.arange(documents))
            batch["positions"] = np.broadcast_to(
                (np.arange(t) - starts[doc]).astype(np.int32), (b, t)).copy()
    return batch


def memory_bytes(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                   - m.alias_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def time_step(step, state, batch, rng_fn):
    """(compile s, median step s, compiled memory, final state) for a donated-state step."""
    t0 = time.perf_counter()
    compiled = step.lower(state, batch, rng_fn(0)).compile()
    compile_s = time.perf_counter() - t0
    for i in range(FLAGS.warmup):
        state, m = compiled(state, batch, rng_fn(i))
    jax.block_until_ready(m)
    times = []
    for i in range(FLAGS.steps):
        t = time.perf_counter()
        state, m = compiled(state, batch, rng_fn(i))
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t)
    return compile_s, statistics.median(times), memory_bytes(compiled), m


class FakeTokenizer:
    """The special ids the objectives need, without a sentencepiece model."""
    special_ids, mask_id = (0, 1, 2, 3, 4), 4
    word_start_table = staticmethod(lambda: None)


def ours(config, peak):
    from encoder.objectives import objectives
    from encoder.train import flops, optimizer, partitioning, pretrain, trainer as trainer_lib

    ctx = objectives.make_context(config, FakeTokenizer(), most_frequent_id=5)
    objective = objectives.OBJECTIVES[config.objective]
    # The very step pretraining compiles (encoder/train/trainer.py), not a copy of it.
    trainer = trainer_lib.Trainer(
        partitioning.make_mesh(config.mesh), optimizer.make_optimizer(config.train),
        pretrain.model_init_fn(ctx.model, config.data.seq_len, ctx.max_predictions),
        loss_fn=lambda p, b, r: objective.loss_fn(p, b, r, ctx),
        prepare=lambda b, r: objective.prepare(b, r, ctx), seed=config.seed)
    state = trainer.initial_state
    batch = trainer.shard(random_batch(config))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    compile_s, step_s, mem, metrics = time_step(trainer.step_fn, state, batch,
                                                lambda i: jax.random.key(i))
    fps = flops.config_train_flops_per_step(config)
    return report("this codebase", config, n_params, compile_s, step_s, fps, peak, mem,
                  loss=float(metrics["loss"]))


def hf(config, peak):
    """FlaxBertForMaskedLM with the same config, loss (masked slots) and AdamW."""
    from transformers import BertConfig, FlaxBertForMaskedLM
    from encoder import config as config_lib
    from encoder.objectives import masking, mlm
    from encoder.train import flops, optimizer
    m = config.model
    hf_cfg = BertConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                        intermediate_size=m.intermediate_size, max_position_embeddings=m.max_position,
                        type_vocab_size=m.type_vocab_size, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, hidden_act="gelu")
    dtype = jnp.dtype(m.dtype)
    model = FlaxBertForMaskedLM(hf_cfg, input_shape=(1, config.data.seq_len), dtype=dtype, seed=0)
    params = model.params
    tx = optimizer.make_optimizer(config.train)
    opt_state = tx.init(params)
    max_pred = config_lib.max_predictions(config.data.seq_len, config.masking.rate)

    def step(state, batch, rng):
        params, opt_state = state
        c = masking.corrupt(rng, batch["input_ids"], batch["attention_mask"],
                            rate=config.masking.rate, max_predictions=max_pred, mask_id=4,
                            vocab_size=m.vocab_size, special_ids=(0, 1, 2, 3, 4))

        def loss_fn(p):
            logits = model(c["input_ids"], batch["attention_mask"], batch["segment_ids"],
                           params=p, train=False).logits  # [B, T, V]: every position
            gathered = jnp.take_along_axis(logits, c["mlm_positions"][..., None], axis=1)
            loss, _ = mlm.masked_cross_entropy(gathered.astype(jnp.float32), c["mlm_labels"],
                                               c["mlm_weights"])
            return loss

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}

    batch = {k: jnp.asarray(v) for k, v in random_batch(config).items()}
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    compile_s, step_s, mem, metrics = time_step(jax.jit(step, donate_argnums=(0,)),
                                                (params, opt_state), batch,
                                                lambda i: jax.random.key(i))
    b, t = config.train.batch_size, config.data.seq_len
    fwd = b * t * (flops.encoder_flops_per_token(m, t) + flops.mlm_head_flops(m))
    return report("huggingface FlaxBertForMaskedLM", config, n_params, compile_s, step_s,
                  3.0 * fwd, peak, mem, loss=float(metrics["loss"]))


def report(name, config, n_params, compile_s, step_s, fps, peak, mem, **extra):
    tokens = config.train.batch_size * config.data.seq_len
    row = {"implementation": name, "size": config.model.size,
           "attention_impl": config.model.attention_impl, "objective": config.objective,
           "seq_len": config.data.seq_len, "batch_size": config.train.batch_size,
           "vocab_size": config.model.vocab_size, "dtype": config.model.dtype,
           "device": jax.devices()[0].device_kind, "num_devices": jax.device_count(),
           "parameters": n_params, "compile_s": round(compile_s, 3),
           "step_s_median": round(step_s, 5), "tokens_per_s": round(tokens / step_s, 1),
           "flops_per_step": fps, "flops_per_s": fps / step_s,
           "fraction_of_peak": fps / step_s / (peak * jax.device_count()),
           "peak_flops_per_device": peak, "compiled_memory_bytes": mem, **extra}
    return row


def bench_steps():
    from encoder.train import flops
    config = compile_config() if FLAGS.config is not None else bench_config()
    peak = flops.peak_flops_per_device()
    row = ours(config, peak)
    print(json.dumps(row), flush=True)
    if FLAGS.against == "hf":
        ref = hf(config, peak)
        if ref["parameters"] != row["parameters"]:
            raise AssertionError(f"parameter counts differ: ours {row['parameters']:,}, "
                                 f"HF {ref['parameters']:,}")
        ref["speedup"] = row["tokens_per_s"] / ref["tokens_per_s"]
        print(json.dumps(ref), flush=True)


def bench_pipeline():
    import tempfile
    from encoder.data import pipeline, prepare, shards, tokenizer as tokenizer_lib
    from encoder.data import corpus
    docs = corpus.stdlib_documents()
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer_lib.load(tokenizer_lib.train_sentencepiece(docs, f"{tmp}/sp", 8000))
        t0 = time.perf_counter()
        manifest = prepare.prepare(prepare.STDLIB, f"{tmp}/prep", tokenizer=tok.path)
        prep_s = time.perf_counter() - t0
        c = shards.PreparedCorpus(f"{tmp}/prep")
        rows = shards.PackedRows(c, "train", FLAGS.seq_len, tok.cls_id, tok.sep_id, tok.pad_id)
        t0 = time.perf_counter()
        n = sum(int(b["attention_mask"].sum())
                for b in pipeline.batch_iterator(rows, 32, seed=0, repeat=False))
        read_s = time.perf_counter() - t0
    FLAGS.size, FLAGS.vocab_size = "tiny", 8000
    from encoder.train import flops
    step = ours(bench_config(), flops.peak_flops_per_device())
    tokens = manifest["splits"]["train"]["tokens"] + manifest["splits"]["valid"]["tokens"]
    print(json.dumps({"benchmark": "pipeline", "documents": len(docs), "tokens": n,
                      "prepare_tokens_per_s": round(tokens / prep_s),
                      "read_tokens_per_s": round(n / read_s),
                      "tiny_train_step_tokens_per_s": step["tokens_per_s"],
                      "read_over_train_step": round(n / read_s / step["tokens_per_s"], 1),
                      "prepare_over_train_step": round(tokens / prep_s / step["tokens_per_s"],
                                                       1)}))


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


def bench_prepare():
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
                m = _measure([py, "-m", "encoder.data.prepare", f"--input={text}",
                              f"--out={out}", f"--tokenizer={tok_path}", f"--num_workers={w}"])
                print(json.dumps({"benchmark": "prepare", "corpus_mb": round(mb, 1),
                                  "workers": w, "seconds": m["seconds"],
                                  "mb_per_s": round(mb / m["seconds"], 2),
                                  "peak_rss_gb": m["peak_rss_gb"]}), flush=True)
            work = f"{root}/run-{size:g}"
            shutil.rmtree(work, ignore_errors=True)
            m = _measure([py, "-m", "encoder.main", "--config=experiments/pretrain.py",
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


def abstract_batch(config, mesh) -> dict:
    """ShapeDtypeStructs of one global pretraining batch (what the pipeline yields), sharded."""
    from encoder.train import partitioning
    b, t = config.train.batch_size, config.data.seq_len
    sharding = partitioning.batch_sharding(mesh)
    keys = ["input_ids", "segment_ids", "attention_mask", "document_ids", "positions"]
    batch = {k: jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=sharding) for k in keys}
    if config.pair_task != "none":
        batch["pair_labels"] = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=sharding)
    return batch


def _bytes_per_device(tree, shardings) -> int:
    """Bytes one device holds of a sharded tree (its shard of every leaf)."""
    leaves = jax.tree.leaves(tree)
    specs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    return sum(int(np.prod(s.shard_shape(x.shape))) * jnp.dtype(x.dtype).itemsize
               for x, s in zip(leaves, specs))


def _xla_flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


def compile_step(config, devices=None):
    """The pretraining train step lowered and compiled for config's shapes, from shapes
    alone (no parameter is allocated): (compiled, abstract state, shardings, mesh, seconds)."""
    from encoder.objectives import objectives
    from encoder.train import optimizer, partitioning, pretrain, trainer as trainer_lib
    ctx = objectives.make_context(config, FakeTokenizer(), most_frequent_id=5)
    objective = objectives.OBJECTIVES[config.objective]
    mesh = partitioning.make_mesh(config.mesh, devices)
    tx = optimizer.make_optimizer(config.train)
    init = pretrain.model_init_fn(ctx.model, config.data.seq_len, ctx.max_predictions)
    abstract, shardings = trainer_lib.state_shapes(init, tx, mesh, jax.random.key(0))
    step = trainer_lib.jit_step(trainer_lib.make_step(
        lambda p, b, r: objective.loss_fn(p, b, r, ctx), tx,
        lambda b, r: objective.prepare(b, r, ctx), config.train.grad_accum_steps),
        shardings, mesh)
    state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         abstract, shardings)
    rng = jax.eval_shape(lambda: jax.random.key(0))
    t0 = time.perf_counter()
    lowered = step.lower(state, abstract_batch(config, mesh), rng)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return compiled, abstract, shardings, mesh, (t1 - t0, time.perf_counter() - t1)


def unrolled_xla_flops(config, devices=None) -> float:
    """XLA's FLOPs of the whole unrolled step, extrapolated from 1- and 2-layer compiles.

    XLA's cost analysis counts a while loop's body once, so a scanned stack's own count
    misses (G - 1) groups; the layers are identical in FLOPs (a dense mask costs the same
    for local and global layers), so count(L) = count(1) + (L - 1) (count(2) - count(1)).
    """
    counts = []
    for depth in (1, 2):
        probe = config.copy_and_resolve_references()
        probe.model.num_layers = depth
        probe.electra.generator_layers = min(probe.electra.generator_layers, depth)
        probe.model.scan_layers = "false"
        counts.append(_xla_flops(compile_step(probe, devices)[0]))
    return counts[0] + (config.model.num_layers - 1) * (counts[1] - counts[0])


def compile_report(config, unrolled_flops: bool = True, devices=None) -> dict:
    """Per-device memory and FLOPs of the compiled train step (see compile_step).

    XLA's FLOPs count every op of the step (norms, softmax, the optimizer, the
    masking); the analytic count (encoder.train.flops) only the matmuls. With a
    scanned stack the raw count covers one loop iteration: `xla_flops_unrolled`
    (unrolled_flops=True) is the whole step's and is what the ratio uses.
    """
    from encoder.model import scan
    from encoder.train import flops
    compiled, abstract, shardings, mesh, (lower_s, compile_s) = compile_step(config, devices)
    n = mesh.devices.size
    mem = compiled.memory_analysis()
    analytic = flops.config_train_flops_per_step(config) / n
    xla = _xla_flops(compiled)
    p = scan.plan(config.model)
    full = unrolled_xla_flops(config, devices) if (p is not None and unrolled_flops) else (
        None if p is not None else xla)
    return {"benchmark": "compile", "size": config.model.size, "objective": config.objective,
            "num_layers": config.model.num_layers, "scan_groups": p.groups if p else 0,
            "seq_len": config.data.seq_len, "global_batch": config.train.batch_size,
            "devices": n, "mesh": dict(mesh.shape), "dtype": config.model.dtype,
            "remat": config.model.remat, "attention_impl": config.model.attention_impl,
            "platform": jax.devices()[0].platform,
            "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract.params)),
            "lower_s": round(lower_s, 2), "compile_s": round(compile_s, 2),
            # per device:
            "param_bytes": _bytes_per_device(abstract.params, shardings.params),
            "optimizer_bytes": _bytes_per_device(abstract.opt_state, shardings.opt_state),
            "temp_bytes": int(mem.temp_size_in_bytes),
            "argument_bytes": int(mem.argument_size_in_bytes),
            "output_bytes": int(mem.output_size_in_bytes),
            "alias_bytes": int(mem.alias_size_in_bytes),
            "peak_bytes": int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                              - mem.alias_size_in_bytes + mem.temp_size_in_bytes),
            "analytic_flops": analytic, "xla_flops": xla, "xla_flops_unrolled": full,
            "xla_over_analytic": full / analytic if full else None}


def compile_config():
    """The experiment config with the command line's shape and variant overrides."""
    config = FLAGS.config.copy_and_resolve_references()
    if FLAGS["seq_len"].present:
        config.data.seq_len = FLAGS.seq_len
        config.model.max_position = max(config.model.max_position, FLAGS.seq_len)
    if FLAGS["batch_size"].present:
        config.train.batch_size = FLAGS.batch_size
    for name in ("dtype", "attention_impl", "remat", "scan_layers"):
        if FLAGS[name].present:
            config.model[name] = FLAGS[name].value
    from encoder.train import pretrain
    pretrain.validate(config)
    return config


def bench_compile():
    if FLAGS.config is None:
        raise app.UsageError("--mode=compile needs --config=experiments/NAME.py[:arg]")
    row = compile_report(compile_config(), FLAGS.unrolled_flops)
    gib = lambda b: round(b / 2**30, 3)  # noqa: E731
    row.update({k.replace("_bytes", "_gib"): gib(v) for k, v in list(row.items())
                if k.endswith("_bytes")})
    print(json.dumps(row), flush=True)


# The accelerator benchmark, one run of each (~40-60 s each on an H100/H200;
# the whole plan is meant to fit a 10-minute device session). Each entry: the flags of one
# `python -m encoder.bench` step-mode run.
DEVICE_PLAN = [
    *[["--size=base", "--seq_len=128", "--batch_size=256", f"--attention_impl={impl}"]
      for impl in ("xla", "cudnn")],
    *[["--size=base", "--seq_len=512", "--batch_size=64", f"--attention_impl={impl}"]
      for impl in ("xla", "cudnn", "pallas_gpu")],
    *[["--config=experiments/modernbert_base.py", "--seq_len=8192", "--batch_size=2",
       f"--attention_impl={impl}", "--scan_layers=true"]
      for impl in ("xla", "cudnn", "pallas_gpu")],
]


def bench_device():
    """Runs DEVICE_PLAN (bf16, 10 timed steps each), one subprocess per entry so a failing
    backend cannot take the others down; prints every JSON row and a failure line per crash."""
    import subprocess
    import sys
    for flags_ in DEVICE_PLAN:
        cmd = [sys.executable, "-m", "encoder.bench", *flags_, "--dtype=bfloat16",
               f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rows = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        for line in rows:
            print(json.dumps({"flags": " ".join(flags_), **json.loads(line)}), flush=True)
        if proc.returncode != 0 or not rows:
            print(json.dumps({"flags": " ".join(flags_), "failed": proc.returncode,
                              "stderr_tail": proc.stderr[-1500:]}), flush=True)


def main(argv):
    del argv
    if FLAGS.devices:  # before anything initialises the CPU backend
        jax.config.update("jax_num_cpu_devices", FLAGS.devices)
    {"pipeline": bench_pipeline, "prepare": bench_prepare, "step": bench_steps,
     "compile": bench_compile, "device": bench_device}[FLAGS.mode]()


if __name__ == "__main__":
    define_flags()
    app.run(main)
