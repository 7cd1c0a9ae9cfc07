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
        [--topology=v5e:2x2 [--num_slices=N] | --devices=8] [--seq_len=512] [--batch_size=64]
        [--dtype=bfloat16] [--scan_layers=auto|true|false] [--remat=...] [--attention_impl=..]
        [--config.mesh.data=.. --config.mesh.fsdp=..] [--job=finetune --task=classification]

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
import importlib
import os
import sys

import jax
from absl import app, flags
from ml_collections import config_flags

from encoder.tasks import table as tasks_table

MODES = ("step", "pipeline", "prepare", "compile", "device")  # benchmarks/<mode>.py


def define_flags():
    """The command line's flags (defined when this module runs as the program)."""
    flags.DEFINE_enum("mode", "step", list(MODES),
                      "what to benchmark")
    config_flags.DEFINE_config_file(
        "config", None, "step / compile: an experiment file[:arg] (step: instead of --size)",
        lock_config=True)
    flags.DEFINE_integer("devices", 0, "compile: simulated CPU devices (0: those present)",
                         lower_bound=0)
    flags.DEFINE_enum("scan_layers", "", ["", "auto", "true", "false"],
                      "override model.scan_layers")
    flags.DEFINE_string("topology", "", "compile: a TPU topology (libtpu: v5e:2x2, v5p:4x4x4, "
                        "v6e:8x8, v4:2x2x1) or a GPU node (XLA's CUDA compiler: h100:8, "
                        "h100:2x8 = 2 hosts of 8, a100:8, h200:8) to compile for on this "
                        "machine; empty: --devices")
    flags.DEFINE_string("phase", "", "compile: a phased recipe's phase to compile its step as "
                        "it runs (its seq_len, batch, accumulation, RoPE base); default: the "
                        "first phase")
    flags.DEFINE_integer("grad_accum_steps", 1, "compile: micro-batches per step (default: "
                         "the phase's or config's)", lower_bound=1)
    flags.DEFINE_integer("num_slices", 1, "compile: slices of --topology joined over DCN",
                         lower_bound=1)
    flags.DEFINE_enum("job", "pretrain", ["pretrain", "finetune"],
                      "compile: the pretraining step or a fine-tuning step (with --task)")
    flags.DEFINE_string("task", tasks_table.DEFAULT, "compile --job=finetune: the task type "
                        f"({' | '.join(tasks_table.having('label_fields'))})")
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


def main(argv):
    del argv
    if FLAGS.devices:  # before anything initialises the CPU backend
        jax.config.update("jax_num_cpu_devices", FLAGS.devices)
    # benchmarks/ sits beside encoder/ (outside the library): run from the repository root.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    importlib.import_module(f"benchmarks.{FLAGS.mode}").run()


if __name__ == "__main__":
    define_flags()
    from encoder import errors
    app.run(errors.one_line_errors(main), flags_parser=errors.parse_flags)
