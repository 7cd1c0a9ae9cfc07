"""`python -m encoder bench`: benchmarks that print JSON lines (one per implementation), never asserted in tests.

Train step (default):
    python -m encoder bench --size=mini --seq_len=128 --batch_size=32 [--objective=mlm]
        [--against=hf|torch|torch_eager|torch_compiled]

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

  --against=torch adds HuggingFace's PyTorch model (BertForMaskedLM, or
  ModernBertForMaskedLM for a ModernBERT config) at the same shapes, vocabulary,
  masking rate and masked-slot loss, fused (GPU) / foreach (CPU) AdamW, bf16
  autocast on a GPU, SDPA or flash attention: two rows, eager and torch.compile
  (--against=torch_eager or torch_compiled for one). All sides are stepped in
  turns of --interleave steps so they see the same load; every row has
  tokens_per_s, mfu (one FLOP count for all), parameters (equal, asserted),
  loss after the timed steps, peak_bytes and threads (benchmarks/torch_reference.py).

  With --config=experiments/NAME.py[:arg] the step runs that experiment's model and
  data layout (packed documents, restarted positions) instead of a --size preset.

On a GPU, the whole accelerator benchmark in one call:
    python -m encoder bench --mode=device [--steps=10]

  BERT-base MLM in bf16 at T=128 and 512 and the ModernBERT-like recipe at T=8,192
  (packed rows), with every attention backend that serves it (DEVICE_PLAN), one
  subprocess each: tokens/s, MFU and memory per row.

Where the step's time goes (a jax.profiler trace reduced to a table on the machine):
    python -m encoder bench --mode=profile --size=base --seq_len=128 --batch_size=256
        [--dtype=bfloat16] [--steps=5] [--profile_dir=DIR]

  Writes DIR/profile.json and DIR/profile.md: per category (attention kernels,
  matrix products, optimizer, masking and MLM head, copies and transposes,
  elementwise fusions, other, host gaps) the ms per step and share, and the
  ops that took longest (benchmarks/profile_step.py).

What the compiled step asks of a GPU, without one (XLA's CUDA compiler):
    python -m encoder bench --mode=program --topology=h200:1 --size=base --seq_len=128
        --batch_size=256 --dtype=bfloat16 [--dropout=0.1]

  Kernels a step by category, bytes the non-matrix kernels move, copies and
  transposes around cuDNN attention, the optimizer's kernels
  (benchmarks/gpu_program.py).

Input pipeline:
    python -m encoder bench --mode=pipeline [--seq_len=128]

  tokens/s of prepare (tokenize into shards) and of reading packed, shuffled
  batches back from them, on the embedded corpus, each as a multiple of the
  tiny model's train-step tokens/s here.

Ahead-of-time sizing (no parameter is allocated, nothing runs):
    python -m encoder bench --mode=compile --config=experiments/bert_base.py[:arg]
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
    python -m encoder bench --mode=prepare [--sizes_mb=25,250,2500] [--workers=1,2]
        [--bench_dir=DIR]

  Builds text corpora of each size by repeating the embedded corpus (each
  copy's documents marked, so they are distinct), then for each: prepare's
  MB/s and peak resident memory (the whole process tree) with each worker
  count, a training run's peak memory and seconds to its first step on the
  prepared corpus, and batches/s read back from it. Runs subprocesses; the
  corpora stay in --bench_dir (default: a temporary folder, removed).
"""
import sys

from absl import flags

from encoder import errors
from encoder.commands.one_line import one_line_errors

# benchmarks/ sits beside encoder/ (outside the library, installed with it by pyproject's
# packages.find): each benchmark declares its own flags
from benchmarks import compile as compile_bench
from benchmarks import device, gpu_program, pipeline, prepare, profile_step, step

MODES = {"step": step, "pipeline": pipeline, "prepare": prepare, "compile": compile_bench,
         "device": device, "profile": profile_step, "program": gpu_program}
flags.DEFINE_enum("mode", "step", list(MODES), "what to benchmark (benchmarks/<mode>.py)")
FLAGS = flags.FLAGS
# --helpshort lists the benchmarks' own flags too (declared in benchmarks/, not here)
FLAG_MODULES = sorted(m for m in sys.modules if m.startswith("benchmarks"))


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.against.startswith("torch") and FLAGS.mode != "step":
        raise errors.UsageError(f"--against={FLAGS.against} is a step benchmark's reference "
                                f"(--mode=step); --mode={FLAGS.mode} compares with --against=hf")
    MODES[FLAGS.mode].run()
