"""Where each recipe fits: the largest rows per chip on TPUs (v5e 16 GiB, v6e 32 GiB, v5p
95 GiB; libtpu) or GPUs (H100/H200 and A100 80 GB nodes; XLA's CUDA compiler), from
compiles on this CPU machine, one JSON line per compile and a markdown table at the end
(BUILD_NOTES.md, "Fit tables").

    python benchmarks/fit_table.py [--target=tpu|gpu] [--recipes=bert_base,...]

Memory per chip is linear in the rows per chip at a fixed mesh (parameters, optimizer
state and the program's fixed buffers, plus activations per row), and the TPU compiler's
memory analysis hardly depends on the generation, so each (recipe, T) is compiled on a
v5e:2x2 slice with FSDP over its 4 chips at 1 and 2 rows per chip; the line through those
two points gives each chip's largest rows, and one more compile at the first chip's
prediction checks it with --check (stepping down while the compiler says it does not
fit). GPUs are compiled on an 8-GPU node with FSDP over its 8 GPUs, once as H100s (whose
line serves the H200 too) and once as A100s: the kernels differ by compute capability
(cuDNN's packed layout and head dims above 128 need Hopper). The step time is the compile
report's lower bound at that row count, rescaled to each chip's constants (FLOPs / peak
and collective bytes / interconnect: the scanned compiles here skip the unrolled probes,
so XLA's HBM traffic, which counts a loop body once, is left out), and the MFU bound is
the analytic (matmul) FLOPs over that bound at the chip's peak.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only: the CPU runtime stays default

# target family -> [(topology compiled for, its chips per slice, the chips its line predicts)]
TARGETS = {
    "tpu": [("v5e:2x2", 4, ("v5e", "v6e", "v5p"))],
    "gpu": [("h100:8", 8, ("h100", "h200")), ("a100:8", 8, ("a100",))],
}
# (recipe file[:arg], T, remat, scan): the kernel-friendly variants (attention dropout 0) of
# the recipes whose paper used 0.1; ModernBERT's long context rematerialises every layer.
PLAN = [
    ("bert_base:attention_dropout=0", 512, "none", "true"),
    ("bert_large:attention_dropout=0", 512, "none", "true"),
    ("roberta_base:attention_dropout=0", 512, "none", "true"),
    ("electra_base:attention_dropout=0", 512, "none", "true"),
    ("deberta_v3_base", 512, "none", "true"),
    ("modernbert_base", 512, "none", "true"),
    ("modernbert_large", 512, "none", "true"),
    ("modernbert_base", 8192, "full", "true"),
    ("modernbert_large", 8192, "full", "true"),
]
# every other recipe, compiled once at 1 row per chip (each must compile with auto)
OTHERS = ["bert_base", "albert_base", "electra_small", "mosaicbert_base", "pretrain",
          "mmbert_base", "ettin_base", "wsd"]


def load(spec: str, seq_len: int, rows: int, remat: str, scan: str, chips_per_slice: int):
    import importlib
    name, _, arg = spec.partition(":")
    config = importlib.import_module(f"experiments.{name}").get_config(arg or None)
    config.data.seq_len = seq_len
    config.model.max_position = max(config.model.max_position, seq_len)
    config.model.update(dict(dtype="bfloat16", attention_impl="auto", remat=remat,
                             scan_layers=scan))
    config.train.batch_size = rows * chips_per_slice
    config.train.grad_accum_steps = 1
    config.phases = ()  # one step shape: the recipe's first (or only) phase's
    config.mesh.data, config.mesh.fsdp = 1, chips_per_slice
    return config


def compile_row(spec, seq_len, rows, remat, scan, topology="v5e:2x2", chips_per_slice=4) -> dict:
    from encoder.aot import compile_report
    t0 = time.perf_counter()
    try:
        row = compile_report.compile_report(
            load(spec, seq_len, rows, remat, scan, chips_per_slice), unrolled_flops=False,
            topology=topology)
    except Exception as e:  # noqa: BLE001 - a recipe that does not compile is a finding
        row = {"fits": False, "error": f"{type(e).__name__}: {str(e)[:500]}"}
    row.update(recipe=spec, seq_len=seq_len, rows_per_chip=rows,
               wall_s=round(time.perf_counter() - t0, 1))
    print(json.dumps(row), flush=True)
    return row


def largest_rows(fixed: float, per_row: float, hbm: int) -> int:
    return max(0, int((hbm - fixed) // per_row)) if per_row > 0 else 0


def fit(spec, seq_len, remat, scan, one: dict, two: dict, check: bool = False,
        target=("v5e:2x2", 4, ("v5e", "v6e", "v5p"))) -> dict:
    """Largest rows per chip on each of the target's chips from the 1- and 2-row compiles
    (and, with check, the compiler's answer at the first chip's prediction)."""
    from encoder.aot import chips
    topology, per_slice, fit_chips = target
    head = {"recipe": spec, "seq_len": seq_len, "remat": remat, "scan": scan,
            "topology": topology}
    if not (one.get("fits") and "temp_bytes" in one):
        return {**head, "rows": {c: 0 for c in fit_chips}, "rows_1": one.get("peak_bytes"),
                "error": one.get("error")}
    if two is not one and "temp_bytes" in two and two["rows_per_chip"] != one["rows_per_chip"]:
        per_row = two["peak_bytes"] - one["peak_bytes"]
        head["bound"] = "line through 1 and 2 rows"
    else:  # one point: every temp byte counted per row, so the rows are a lower bound
        two = one
        per_row = one["temp_bytes"]
        head["bound"] = "lower bound (1-row compile; all temp counted per row)"
    fixed = one["peak_bytes"] - per_row
    rows = {c: largest_rows(fixed, per_row, chips.CHIPS[c].hbm_bytes) for c in fit_chips}
    first = fit_chips[0]
    checked, r = None, rows[first]
    while check and r >= 1:  # the compiler has the last word on the first chip
        checked = compile_row(spec, seq_len, r, remat, scan, topology, per_slice)
        if checked.get("fits") and "temp_bytes" in checked:
            break
        r = max(0, min(r - 1, int(r * 0.9)))
    if check:
        rows[first] = r
    base = checked if (checked and "step_time" in checked) else two
    step, mfu = {}, {}
    for c in fit_chips:  # the bound at each chip's rows: per-row work times rows, new constants
        scale = (rows[c] or 1) / base["rows_per_chip"]
        chip, st, ref = chips.CHIPS[c], base["step_time"], base_chip(base)
        # a scanned stack compiled without the unrolled probes has no whole-step HBM count
        hbm_s = st["hbm_s"] if base.get("xla_flops_unrolled") or not base["scan_groups"] else 0
        step[c] = max(st["compute_s"] * scale * ref.peak_flops / chip.peak_flops,
                      hbm_s * scale * ref.hbm_bandwidth / chip.hbm_bandwidth,
                      st["ici_s"] * ref.ici_bandwidth / chip.ici_bandwidth)
        analytic = (base.get("analytic_flops") or 0.0) * scale
        mfu[c] = analytic / (step[c] * chip.peak_flops) if step[c] else None
    return {**head, "params_m": round(one["parameters"] / 1e6, 1),
            "fixed_gib": round(fixed / 2**30, 2), "per_row_gib": round(per_row / 2**30, 3),
            "rows": rows, "step_s": step, "mfu_bound": mfu,
            "attention_kernels": one["attention_kernels"],
            "attention_layers": one.get("attention_layers"),
            "largest_buffer": one.get("largest_buffer"),
            "attention_notes": one["attention_notes"]}


def base_chip(row):
    from encoder.aot import chips
    return chips.chip_for_topology(row["topology"])


def kernels_cell(r: dict) -> str:
    """What attention compiled to: kernel calls by family, and each layer kind's path."""
    calls = ", ".join(f"{k} {v}" for k, v in r["attention_kernels"].items() if v) or "none"
    layers = "; ".join(f"{kind}: {' + '.join(paths)}"
                       for kind, paths in (r.get("attention_layers") or {}).items())
    return f"{calls} ({layers})" if layers else calls


def markdown(results: list[dict]) -> str:
    fit_chips = list(results[0]["rows"]) if results else []
    head = ("| recipe | T | remat | scan | params M | GiB fixed + per row | "
            + " | ".join(f"{c} rows (step s, MFU bound)" for c in fit_chips)
            + " | attention kernels (per layer kind) | largest buffer |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if "per_row_gib" not in r:
            why = f": {r['error'][:120]}" if r.get("error") else ""
            lines.append(f"| {r['recipe']} | {r['seq_len']} | {r['remat']} | {r['scan']} | "
                         f"does not fit at 1 row{why} |")
            continue
        ge = "" if r["bound"].startswith("line") else ">= "
        cells = " | ".join(
            f"{ge}{r['rows'][c]} ({r['step_s'][c]:.3f}, {(r['mfu_bound'][c] or 0):.2f})"
            for c in r["rows"])
        lines.append(f"| {r['recipe']} | {r['seq_len']} | {r['remat']} | {r['scan']} | "
                     f"{r['params_m']} | {r['fixed_gib']} + {r['per_row_gib']} | {cells} | "
                     f"{kernels_cell(r)} | {r.get('largest_buffer') or ''} |")
    return "\n".join(lines)


def table_from(paths: str, target_name: str = "tpu") -> str:
    """The fit tables from (possibly partial) runs' compile rows (comma list of files), in
    PLAN order, one per topology of the target."""
    rows = [json.loads(line) for path in paths.split(",") for line in open(path)
            if line.startswith('{"benchmark"') or line.startswith('{"fits"')]
    tables = []
    for target in TARGETS[target_name]:
        results = []
        for spec, t, remat, scan in PLAN:
            mine = {r["rows_per_chip"]: r for r in rows if r.get("recipe") == spec
                    and r.get("seq_len") == t and r.get("topology") in (target[0], None)}
            if 1 in mine:
                results.append(fit(spec, t, remat, scan, mine[1], mine.get(2, mine[1]),
                                   target=target))
        tables.append(f"{target[0]}:\n\n{markdown(results)}")
    return "\n\n".join(tables)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="", help="comma list, in this order: only these "
                        "PLAN entries (NAME, or NAME@T for one length)")
    parser.add_argument("--others", action=argparse.BooleanOptionalAction, default=True,
                        help="also compile every other recipe once (1 row per chip)")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=False,
                        help="compile once more at v5e's predicted rows (the compiler decides)")
    parser.add_argument("--table_from", default="",
                        help="no compiles: the table from the compile rows of an earlier run")
    parser.add_argument("--target", choices=sorted(TARGETS), default="tpu",
                        help="tpu: v5e:2x2 compiles (v5e, v6e, v5p rows); gpu: h100:8 and "
                             "a100:8 compiles (H100, H200, A100 80 GB rows)")
    parser.add_argument("--topology", default="",
                        help="only this one of the target's topologies (e.g. a100:8)")
    args = parser.parse_args()
    if args.topology and args.topology not in [t[0] for t in TARGETS[args.target]]:
        parser.error(f"--topology={args.topology}: --target={args.target} compiles "
                     f"{', '.join(t[0] for t in TARGETS[args.target])}")
    if args.table_from:
        print(table_from(args.table_from, args.target))
        return
    wanted = set(filter(None, args.recipes.split(",")))
    plan = PLAN if not wanted else [  # in the order asked: NAME or NAME@T
        p for want in filter(None, args.recipes.split(",")) for p in PLAN
        if want in (p[0].split(":")[0], f"{p[0].split(':')[0]}@{p[1]}")]
    for target in TARGETS[args.target]:
        topology, per_slice, _ = target
        if args.topology and topology != args.topology:
            continue
        # Coverage first (every recipe compiled once, with auto), then each line's second point.
        ones = [compile_row(spec, t, 1, remat, scan, topology, per_slice)
                for spec, t, remat, scan in plan]
        if args.others:
            for name in OTHERS:
                compile_row(name, 512, 1, "none", "auto", topology, per_slice)
        results = []
        for (spec, t, remat, scan), one in zip(plan, ones):
            two = (compile_row(spec, t, 2, remat, scan, topology, per_slice)
                   if one.get("fits") and "temp_bytes" in one else one)
            results.append(fit(spec, t, remat, scan, one, two, args.check, target))
            print(json.dumps({"fit": results[-1]}), flush=True)
        print(f"{topology}:\n\n{markdown(results)}", flush=True)


if __name__ == "__main__":
    main()
