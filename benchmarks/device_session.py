"""A lent GPU's session as data: what benchmarks/device_session.sh runs, in priority order,
inside one time budget, every result under OUT (python -m benchmarks.device_session).

    python -m benchmarks.device_session --out=$OUT [--budget_s=540] [--cpu]

PLAN's entries run one after another as `python -m encoder ARGS...`, each under its own
time cap cut to what is left of the budget (an entry with under MIN_ENTRY_S left is
skipped and says so), stdout to OUT/NAME.jsonl, stderr to OUT/NAME.stderr; times.txt says
what each took and how it ended; tables.md is benchmarks/device_tables.py's reading of
the folder. `--cpu` runs the same plan at CPU sizes (CPU_SIZES: a tiny model, a few
steps): what the tests run to check that every row has the fields the tables read.

The order is what the budget protects first: the side-by-side rows against PyTorch (HF
BertForMaskedLM / ModernBertForMaskedLM, eager and torch.compile), the profile of the
BERT-base step, the same step with its layers unrolled (the change the deviceless
figures point at: benchmarks/gpu_program.py), ModernBERT-base at 1,024 and 8,192 packed,
then the existing accelerator rows (--mode=device).
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

from benchmarks import CHECKOUT

MIN_ENTRY_S = 30
BERT = ["--size=base", "--dtype=bfloat16"]
MODERNBERT = ["--config=experiments/modernbert_base.py", "--dtype=bfloat16"]


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    cap_s: int        # the most this entry may take
    args: tuple       # after `python -m encoder`; {out} is the session's folder
    torch: bool = False  # shares the GPU with PyTorch (jax must not preallocate it)


PLAN = (
    Entry("bert_128_torch", 150, ("bench", *BERT, "--seq_len=128", "--batch_size=256",
                                  "--against=torch"), torch=True),
    Entry("profile_bert_128", 75, ("bench", "--mode=profile", *BERT, "--seq_len=128",
                                   "--batch_size=256", "--steps=5",
                                   "--profile_dir={out}/profile_bert_128")),
    Entry("bert_128_unrolled", 60, ("bench", *BERT, "--seq_len=128", "--batch_size=256",
                                    "--scan_layers=false")),
    Entry("profile_bert_128_unrolled", 75, ("bench", "--mode=profile", *BERT, "--seq_len=128",
                                            "--batch_size=256", "--steps=5",
                                            "--scan_layers=false",
                                            "--profile_dir={out}/profile_bert_128_unrolled")),
    Entry("bert_512_torch", 150, ("bench", *BERT, "--seq_len=512", "--batch_size=64",
                                  "--against=torch"), torch=True),
    Entry("bert_512_unrolled", 60, ("bench", *BERT, "--seq_len=512", "--batch_size=64",
                                    "--scan_layers=false")),
    Entry("modernbert_1024_torch", 180, ("bench", *MODERNBERT, "--phase=stable",
                                         "--grad_accum_steps=1", "--batch_size=32",
                                         "--against=torch"), torch=True),
    Entry("modernbert_8192_torch", 180, ("bench", *MODERNBERT, "--phase=extension",
                                         "--batch_size=2", "--scan_layers=true",
                                         "--against=torch"), torch=True),
    Entry("device", 300, ("bench", "--mode=device", "--steps=10")),
)

# --cpu: each entry's shapes at a size a CPU runs in seconds (the flags later on the
# command line win over the plan's)
CPU_SIZES = {
    "bench": ("--size=tiny", "--vocab_size=512", "--dtype=float32", "--steps=2",
              "--warmup=1", "--interleave=1"),
    "modernbert": ("--batch_size=2", "--seq_len=256", "--steps=2", "--warmup=1",
                   "--dtype=float32", "--interleave=1"),
}


def command(entry: Entry, out: str, cpu: bool = False) -> list[str]:
    """The argv of one entry (the CPU sizes appended with --cpu)."""
    args = [a.replace("{out}", out) for a in entry.args]
    if cpu:
        if any(a.startswith("--config=experiments/modernbert") for a in args):
            # the eager side only: its row has the compiled side's fields, at a third of
            # the CPU time
            args = [a.replace("modernbert_base.py", "modernbert_base.py:size=tiny")
                    .replace("--against=torch", "--against=torch_eager")
                    for a in args] + list(CPU_SIZES["modernbert"])
        elif "--mode=device" in args:
            return []  # the accelerator rows need a GPU
        else:
            args += [a for a in CPU_SIZES["bench"]
                     if not ("--mode=profile" in args and a.startswith("--interleave"))]
            if "--mode=profile" not in args:
                args = [a if not a.startswith("--batch_size") else "--batch_size=4"
                        for a in args]
            else:
                args = [a if not a.startswith("--batch_size") else "--batch_size=2"
                        for a in args]
    return [sys.executable, "-m", "encoder", *args]


def run_entry(entry: Entry, out: str, seconds: float, cpu: bool) -> dict:
    argv = command(entry, out, cpu)
    if not argv:
        return {"entry": entry.name, "status": "not on a CPU"}
    env = dict(os.environ)
    if entry.torch:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    t0 = time.time()
    with open(os.path.join(out, f"{entry.name}.jsonl"), "w") as stdout, \
            open(os.path.join(out, f"{entry.name}.stderr"), "w") as stderr:
        try:
            rc = subprocess.run(argv, stdout=stdout, stderr=stderr, cwd=CHECKOUT, env=env,
                                timeout=seconds).returncode
            status = "ok" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            status = f"stopped at its {seconds:.0f} s limit"
    return {"entry": entry.name, "status": status, "seconds": round(time.time() - t0, 1),
            "command": " ".join(argv[1:])}


def run_plan(out: str, budget_s: float, cpu: bool = False, plan=PLAN) -> list[dict]:
    """Runs plan within budget_s; returns (and appends to OUT/times.txt) one record each."""
    os.makedirs(out, exist_ok=True)
    deadline = time.time() + budget_s
    records = []
    for entry in plan:
        left = deadline - time.time()
        if left < MIN_ENTRY_S:
            record = {"entry": entry.name, "status": f"skipped: {left:.0f} s of the budget left"}
        else:
            record = run_entry(entry, out, min(entry.cap_s, left), cpu)
        records.append(record)
        with open(os.path.join(out, "times.txt"), "a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)
    return records


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/device_out"))
    ap.add_argument("--budget_s", type=float, default=540.0)
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args(argv)
    run_plan(args.out, args.budget_s, args.cpu)
    from benchmarks import device_tables
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(device_tables.markdown(args.out))


if __name__ == "__main__":
    main()
