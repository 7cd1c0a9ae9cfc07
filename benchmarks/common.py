"""What every benchmark shares: the configs they run, timing a compiled step, the row."""
import statistics
import time

import jax
from absl import flags
from ml_collections import config_flags

# The flags the step, pipeline, compile and device benchmarks share (each benchmark
# declares the rest of its own; `python -m encoder bench` adds only --mode).
config_flags.DEFINE_config_file(
    "config", None, "step / compile: an experiment file[:arg] (step: instead of --size)",
    lock_config=True)
flags.DEFINE_string("size", "mini", "model size preset")
flags.DEFINE_integer("seq_len", 128, "tokens per row", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "rows per step", lower_bound=1)
flags.DEFINE_integer("vocab_size", 32768, "vocabulary size", lower_bound=6)
flags.DEFINE_enum("objective", "mlm", ["mlm", "rtd"], "pretraining objective")
flags.DEFINE_string("dtype", "", "compute dtype (default: bfloat16 on GPU/TPU, float32 on CPU)")
flags.DEFINE_string("attention_impl", "auto", "auto | xla | cudnn | reference | splash | "
                    "pallas_gpu (encoder.model.attention_backends.BACKENDS)")
flags.DEFINE_string("remat", "none", "rematerialisation policy")
flags.DEFINE_enum("scan_layers", "", ["", "auto", "true", "false"],
                  "override model.scan_layers")
flags.DEFINE_enum("against", "", ["", "hf", "torch", "torch_eager", "torch_compiled"],
                  "reference implementation to compare with (torch: PyTorch eager and "
                  "torch.compile rows; step mode only)")
flags.DEFINE_integer("steps", 20, "timed steps", lower_bound=1)
flags.DEFINE_integer("warmup", 3, "untimed steps after compilation", lower_bound=1)
flags.DEFINE_string("phase", "", "compile: a phased recipe's phase to compile its step as "
                    "it runs (its seq_len, batch, accumulation, RoPE base); default: the "
                    "first phase")
flags.DEFINE_integer("grad_accum_steps", 1, "compile: micro-batches per step (default: "
                     "the phase's or config's)", lower_bound=1)

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
    if FLAGS.scan_layers:
        config.model.scan_layers = FLAGS.scan_layers
    config.data.seq_len = FLAGS.seq_len
    config.data.document_mask = False
    config.train.batch_size = FLAGS.batch_size
    config.train.num_steps = 1000
    config.mesh.data, config.mesh.fsdp = -1, 1
    from encoder.jobs import pretrain
    pretrain.validate(config)
    return config


def phase_of(config, name: str):
    """(config as phase `name` runs it, the phase's name). A phased recipe's step is
    compiled as one phase runs it: the phase's sequence length, batch, accumulation and
    RoPE base laid over the base config, at the phase's full batch (a batch-size warmup's
    smaller steps run the same micro-batch program fewer times). Without a name, the first
    phase; a config without phases is its own one phase, "main"."""
    from encoder import errors
    from encoder.train import phases
    declared = phases.declared(config)
    if not declared:
        if name not in ("", "main"):
            raise errors.UsageError(f"--phase={name}: this config has no phases (it runs as "
                                    "one phase, 'main')")
        return config, "main"
    names = [p["name"] for p in declared]
    if name and name not in names:
        raise errors.UsageError(f"--phase={name}: the config's phases are {', '.join(names)}")
    p = declared[names.index(name)] if name else declared[0]
    config = phases.phase_config(config, p)
    config.train.batch_warmup_tokens = 0
    return config, p["name"]


def experiment_config():
    """The experiment config with the command line's phase, shape and variant overrides."""
    from encoder import errors
    config, phase = phase_of(FLAGS.config.copy_and_resolve_references(), FLAGS.phase)
    if config.get("mode", "pretrain") != "pretrain":
        raise errors.UsageError(
            f"--config: a {config.get('mode')} experiment; --mode={FLAGS.mode} reads "
            "pretraining experiments (a fine-tuning step: --mode=compile --job=finetune "
            "--config=experiments/pretrain.py[:size=...], the model it fine-tunes)")
    if FLAGS["grad_accum_steps"].present:
        config.train.grad_accum_steps = FLAGS.grad_accum_steps
    if FLAGS["seq_len"].present:
        config.data.seq_len = FLAGS.seq_len
        config.model.max_position = max(config.model.max_position, FLAGS.seq_len)
    if FLAGS["batch_size"].present:
        config.train.batch_size = FLAGS.batch_size
    for name in ("dtype", "attention_impl", "remat", "scan_layers"):
        if FLAGS[name].present:
            config.model[name] = FLAGS[name].value
    accum = config.train.grad_accum_steps
    if config.train.batch_size % accum:
        raise errors.UsageError(
            f"--batch_size={config.train.batch_size} does not split into the "
            f"grad_accum_steps={accum} micro-batches of "
            f"{'the config' if phase == 'main' else f'phase {phase!r}'}: give a multiple of "
            f"{accum}, or --grad_accum_steps=N (or --phase=NAME for another phase)")
    from encoder.jobs import pretrain
    pretrain.validate(config)
    return config


def memory_bytes(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                   - m.alias_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def time_step(step, state, batch, rng_fn, traced=None):
    """(compile s, median step s, compiled memory, final state) for a donated-state step;
    traced() is called once the step is compiled, before it runs (a GPU run's first line
    says which kernels each layer took)."""
    t0 = time.perf_counter()
    compiled = step.lower(state, batch, rng_fn(0)).compile()
    compile_s = time.perf_counter() - t0
    if traced is not None:
        traced()
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


def attention_ran(trace) -> dict:
    """The row's attention as compiled: `attention_ran` (the paths an
    encoder.aot.attention_trace.traced() block recorded while the step was traced: splash,
    pallas_gpu, cudnn, xla, reference, a kernel in interpret mode, or the reference path
    of attention dropout), beside `attention_impl` (what was asked), and
    `attention_notes`: every fallback and its reason."""
    return {"attention_ran": trace.described(), "attention_notes": list(trace.notes)}


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
           "peak_flops_per_device": peak, "compiled_memory_bytes": mem,
           **device_peak_bytes(), **extra}
    return row


def device_peak_bytes() -> dict:
    """{"device_peak_bytes": the allocator's high-water mark} where the backend keeps one
    (GPUs; not the CPU): what the device really held, beside the compiled program's own
    figure (compiled_memory_bytes)."""
    stats = jax.devices()[0].memory_stats() or {}
    return {"device_peak_bytes": int(stats["peak_bytes_in_use"])} \
        if "peak_bytes_in_use" in stats else {}
