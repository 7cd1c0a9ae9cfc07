"""FSDP against data parallelism at equal rows per chip: per-chip memory and collectives of
the pretraining step compiled for a v5e:2x2 slice (libtpu) or a GPU node (--topology=h100:8,
XLA's CUDA compiler) on this CPU machine, one JSON line per compile (BUILD_NOTES.md, "TPU
compiles" and "GPU compiles").

    python benchmarks/fsdp_memory.py [--shape=mini] [--seq_len=512] [--rows_per_chip=8]
        [--grad_accum=1] [--scan=false] [--meshes=dp,fsdp] [--topology=v5e:2x2]

--shape=tiny is the 2-layer model of tests/e2e/test_tpu_compile.py (V=512, T=128);
--shape=mini the `mini` size (4 layers, D=256) with BERT's 30,522-word vocabulary, where
the token table is 70% of the parameters. bf16, splash (TPU) or auto (GPU: cuDNN), no
dropout.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only: the CPU runtime stays default

MESHES = {"dp": lambda n: (n, 1), "fsdp": lambda n: (1, n)}  # chips -> (data, fsdp)


def config_for(shape: str, seq_len: int, rows_per_chip: int, grad_accum: int, scan: str,
               mesh: str, chips: int = 4, impl: str = "splash"):
    from encoder import config as config_lib
    c = config_lib.base_config()
    if shape == "tiny":
        c.model.update(dict(vocab_size=512, hidden_size=128, num_heads=2, intermediate_size=256,
                            num_layers=2, max_position=128))
        seq_len = 128
    else:
        config_lib.OPTIONS["size"](c, shape)
        c.model.update(dict(vocab_size=30522, max_position=seq_len))
    c.model.update(dict(scan_layers=scan, dtype="bfloat16", attention_impl=impl,
                        dropout=0.0, attention_dropout=0.0))
    c.data.seq_len = seq_len
    c.train.batch_size = rows_per_chip * chips
    c.train.grad_accum_steps = grad_accum
    c.mesh.data, c.mesh.fsdp = MESHES[mesh](chips)
    return c


def measure(config, topology: str = "v5e:2x2") -> dict:
    import jax
    from encoder.aot import compile_report
    t0 = time.time()
    # the default matmul precision, as a TPU run has it (Mosaic refuses `highest` for bf16)
    with jax.default_matmul_precision("default"):
        row = compile_report.compile_report(config, topology=topology)
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
    parser.add_argument("--topology", default="v5e:2x2", help="a TPU slice or a GPU node")
    args = parser.parse_args(argv)
    from encoder.aot import targets
    chips = len(targets.devices(args.topology))
    impl = "auto" if targets.parse_gpu_topology(args.topology) else "splash"
    for mesh in args.meshes.split(","):
        if mesh not in MESHES:
            parser.error(f"--meshes: {mesh!r} is not one of {sorted(MESHES)}")
        c = config_for(args.shape, args.seq_len, args.rows_per_chip, args.grad_accum,
                       args.scan, mesh, chips, impl)
        print(json.dumps({"shape": args.shape, "mesh": mesh, "topology": args.topology,
                          "seq_len": c.data.seq_len, "rows_per_chip": args.rows_per_chip,
                          "grad_accum": args.grad_accum, "scan": args.scan,
                          **measure(c, args.topology)}), flush=True)


if __name__ == "__main__":
    main()
