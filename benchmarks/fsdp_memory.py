"""FSDP against data parallelism at equal rows per chip: per-chip memory and collectives of
the pretraining step compiled for a v5e:2x2 slice on this CPU machine (libtpu), one JSON
line per compile (BUILD_NOTES.md, "FSDP: before / after the activation constraints").

    python benchmarks/fsdp_memory.py [--shape=mini] [--seq_len=512] [--rows_per_chip=8]
        [--grad_accum=1] [--scan=false] [--meshes=dp,fsdp]

--shape=tiny is the 2-layer model of tests/e2e/test_tpu_compile.py (V=512, T=128);
--shape=mini the `mini` size (4 layers, D=256) with BERT's 30,522-word vocabulary, where
the token table is 70% of the parameters. bf16, splash, no dropout.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only: the CPU runtime stays default

TOPOLOGY, CHIPS = "v5e:2x2", 4
MESHES = {"dp": (CHIPS, 1), "fsdp": (1, CHIPS)}  # (data, fsdp)


def config_for(shape: str, seq_len: int, rows_per_chip: int, grad_accum: int, scan: str,
               mesh: str):
    from encoder import config as config_lib
    c = config_lib.base_config()
    if shape == "tiny":
        c.model.update(dict(vocab_size=512, hidden_size=128, num_heads=2, intermediate_size=256,
                            num_layers=2, max_position=128))
        seq_len = 128
    else:
        config_lib.OPTIONS["size"](c, shape)
        c.model.update(dict(vocab_size=30522, max_position=seq_len))
    c.model.update(dict(scan_layers=scan, dtype="bfloat16", attention_impl="splash",
                        dropout=0.0, attention_dropout=0.0))
    c.data.seq_len = seq_len
    c.train.batch_size = rows_per_chip * CHIPS
    c.train.grad_accum_steps = grad_accum
    c.mesh.data, c.mesh.fsdp = MESHES[mesh]
    return c


def measure(config) -> dict:
    import jax
    from encoder.train import compile_report
    t0 = time.time()
    # the default matmul precision, as a TPU run has it (Mosaic refuses `highest` for bf16)
    with jax.default_matmul_precision("default"):
        row = compile_report.compile_report(config, topology=TOPOLOGY)
    mib = {k: round(row[k] / 2**20, 1)
           for k in ("param_bytes", "optimizer_bytes", "temp_bytes", "peak_bytes")}
    coll = {k: [v["count"], round(v["bytes"] / 2**20, 2)]
            for k, v in row["collectives"].items() if v["count"]}
    return {"mib": mib, "collectives_n_mib": coll, "compile_s": round(time.time() - t0)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="mini")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--rows_per_chip", type=int, default=8)
    parser.add_argument("--grad_accum", type=int, default=1)
    parser.add_argument("--scan", default="false", choices=["true", "false"])
    parser.add_argument("--meshes", default="dp,fsdp")
    args = parser.parse_args(argv)
    for mesh in args.meshes.split(","):
        if mesh not in MESHES:
            parser.error(f"--meshes: {mesh!r} is not one of {sorted(MESHES)}")
        c = config_for(args.shape, args.seq_len, args.rows_per_chip, args.grad_accum,
                       args.scan, mesh)
        print(json.dumps({"shape": args.shape, "mesh": mesh, "seq_len": c.data.seq_len,
                          "rows_per_chip": args.rows_per_chip, "grad_accum": args.grad_accum,
                          "scan": args.scan, **measure(c)}), flush=True)


if __name__ == "__main__":
    main()
