"""The tables of a device session's folder (benchmarks/device_session.py leaves it):

    python benchmarks/device_tables.py OUT

1. This codebase against PyTorch: every step row of the folder's *.jsonl files grouped by
   model and shape, one line a side (tokens/s, MFU, step ms, peak memory, loss, compile
   s, and this codebase's speed as a multiple of each side's).
2. Where the step's time goes: each profile_*/profile.json as a category table.
3. The accelerator rows (--mode=device): attention asked and ran, tokens/s, MFU.
4. What ran: times.txt.

Reads only what the benchmarks wrote; the fields it reads are STEP_FIELDS,
PROFILE_FIELDS and DEVICE_FIELDS (tests/benchmarks checks real rows carry them).
"""
import glob
import json
import os
import sys

STEP_FIELDS = ("implementation", "size", "seq_len", "batch_size", "dtype", "device",
               "parameters", "tokens_per_s", "mfu", "step_s_median", "compile_s", "loss",
               "peak_bytes", "threads", "attention_ran")
PROFILE_FIELDS = ("size", "seq_len", "batch_size", "device", "steps", "step_ms_median",
                  "device_busy_ms_median", "categories", "top_ops")
DEVICE_FIELDS = ("flags", "implementation", "attention_impl", "attention_ran",
                 "tokens_per_s", "mfu", "step_s_median")


def read_rows(folder: str) -> dict[str, list[dict]]:
    """{file stem: JSON rows} of the folder's *.jsonl files (lines that are not JSON
    objects are left out)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        rows = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        out[os.path.splitext(os.path.basename(path))[0]] = rows
    return out


def step_rows(rows: list[dict]) -> list[dict]:
    """The step benchmark's rows (one per side), not the attention-trace lines."""
    return [r for r in rows if "implementation" in r and "tokens_per_s" in r
            and "flags" not in r]


def _gib(value) -> str:
    return f"{value / 2**30:.2f}" if isinstance(value, (int, float)) else "-"


def side_table(groups: dict[str, list[dict]]) -> list[str]:
    lines = ["| run | model, shape | side | tokens/s | MFU | step ms | peak GiB | loss | "
             "compile s | ours / side |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, rows in groups.items():
        rows = step_rows(rows)
        if not rows:
            continue
        ours = rows[0]["tokens_per_s"]
        for r in rows:
            shape = f"{r['size']}, {r['batch_size']} x {r['seq_len']}, {r['dtype']}"
            lines.append(
                f"| {name} | {shape} | {r['implementation']} | {r['tokens_per_s']:,.0f} | "
                f"{100 * r['mfu']:.1f}% | {1e3 * r['step_s_median']:.1f} | "
                f"{_gib(r['peak_bytes'])} | {r['loss']:.4f} | {r['compile_s']:.1f} | "
                f"{ours / r['tokens_per_s']:.2f}x |")
    return lines


def profile_tables(folder: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "profile*", "profile.json"))):
        with open(path) as f:
            p = json.load(f)
        out += [f"**{os.path.basename(os.path.dirname(path))}**: {p['size']}, "
                f"{p['batch_size']} x {p['seq_len']} on {p['device']}, {p['steps']} steps, "
                f"step {p['step_ms_median']:.2f} ms, device busy "
                f"{p['device_busy_ms_median']:.2f} ms", "",
                "| category | ms / step | share |", "|---|---|---|"]
        out += [f"| {c['category']} | {c['ms_per_step']:.3f} | {100 * c['share']:.1f}% |"
                for c in p["categories"]]
        out += ["", "| op | category | ms / step |", "|---|---|---|"]
        out += [f"| `{t['op']}` | {t['category']} | {t['ms_per_step']:.3f} |"
                for t in p["top_ops"][:8]]
        out.append("")
    return out


def device_table(rows: list[dict]) -> list[str]:
    lines = ["| flags | asked | ran | tokens/s | MFU | step ms |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "implementation" in r and "tokens_per_s" in r:
            lines.append(f"| {r['flags']} | {r['attention_impl']} | {r['attention_ran']} | "
                         f"{r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | "
                         f"{1e3 * r['step_s_median']:.1f} |")
        elif "failed" in r:
            lines.append(f"| {r['flags']} | failed ({r['failed']}) | - | - | - | - |")
    return lines


def markdown(folder: str) -> str:
    groups = read_rows(folder)
    device_rows = groups.pop("device", [])
    out = ["## This codebase against PyTorch", ""] + side_table(groups) + [""]
    out += ["## Where the step's time goes", ""] + profile_tables(folder)
    if device_rows:
        out += ["## Accelerator rows", ""] + device_table(device_rows) + [""]
    times = os.path.join(folder, "times.txt")
    if os.path.exists(times):
        with open(times) as f:
            out += ["## What ran", "", "```", f.read().rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        raise SystemExit("usage: python benchmarks/device_tables.py OUT (a device session's "
                         "folder)")
    print(markdown(sys.argv[1]), end="")


if __name__ == "__main__":
    main()
