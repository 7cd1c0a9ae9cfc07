"""The accelerator benchmark in one call (python -m encoder bench --mode=device)."""
import json
import subprocess
import sys

from absl import flags

from benchmarks import CHECKOUT

FLAGS = flags.FLAGS


# The accelerator benchmark, one run of each: 10-20 s of compile and a few seconds of steps
# each on an H200 (the whole plan took 3 min 27 s there, installs included). Each entry: the flags of one
# `python -m encoder bench` step-mode run.
DEVICE_PLAN = [
    *[["--size=base", "--seq_len=128", "--batch_size=256", f"--attention_impl={impl}"]
      for impl in ("xla", "cudnn")],
    *[["--size=base", "--seq_len=512", "--batch_size=64", f"--attention_impl={impl}"]
      for impl in ("xla", "cudnn", "pallas_gpu")],
    *[["--config=experiments/modernbert_base.py", "--phase=extension", "--batch_size=2",
       f"--attention_impl={impl}", "--scan_layers=true"]
      for impl in ("xla", "cudnn", "pallas_gpu")],
]


def as_asked(row: dict) -> dict:
    """{"attention_as_asked": bool} for a row that named a backend (not auto): False when
    any layer's attention ran on another path (the row's attention_ran and notes say which
    and why), so a table never credits a kernel with a fallback's speed."""
    asked, ran = row.get("attention_impl"), row.get("attention_ran")
    if ran is None or asked in (None, "auto", "its own"):
        return {}
    return {"attention_as_asked": ran == asked}


def run():
    """Runs DEVICE_PLAN (bf16, 10 timed steps each), one subprocess per entry so a failing
    backend cannot take the others down; prints every JSON row and a failure line per crash.
    Exits non-zero when every entry failed (a benchmark that measured nothing)."""
    failed = 0
    for flags_ in DEVICE_PLAN:
        cmd = [sys.executable, "-m", "encoder", "bench", *flags_, "--dtype=bfloat16",
               f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}"]
        # from the checkout: the plan names its recipes as experiments/NAME.py
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=CHECKOUT)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        rows = [row for row in lines if "implementation" in row]
        for row in lines:  # first, the kernels each layer kind took (printed once compiled)
            if "implementation" not in row:
                print(json.dumps({"flags": " ".join(flags_), **row}), flush=True)
        for row in rows:
            print(json.dumps({"flags": " ".join(flags_), **row, **as_asked(row)}), flush=True)
        if proc.returncode != 0 or not rows:
            failed += 1
            print(json.dumps({"flags": " ".join(flags_), "failed": proc.returncode,
                              "stderr_tail": proc.stderr[-1500:]}), flush=True)
    if failed == len(DEVICE_PLAN):
        raise SystemExit(f"error: every configuration of the device benchmark failed "
                         f"({failed} of {len(DEVICE_PLAN)}); see the stderr_tail rows")
