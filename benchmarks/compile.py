"""Ahead-of-time sizing: the train step compiled from shapes for a mesh of devices (simulated
CPU devices, or a TPU topology compiled by libtpu here), one JSON line per compile
(python -m encoder bench --mode=compile; encoder/aot/compile_report.py has the fields).

    python -m encoder bench --mode=compile --topology=v5e:2x2 \\
        --config=experiments/bert_base.py --seq_len=512 --batch_size=32 --dtype=bfloat16
    python -m encoder bench --mode=compile --topology=h100:8 \\
        --config=experiments/modernbert_base.py --phase=extension --batch_size=8
"""
import json

from absl import app, flags

from benchmarks.common import experiment_config
from encoder.tasks import table as tasks_table

flags.DEFINE_integer("devices", 0, "compile: simulated CPU devices (0: those present)",
                     lower_bound=0)
flags.DEFINE_string("topology", "", "compile: a TPU topology (libtpu: v5e:2x2, v5p:4x4x4, "
                    "v6e:8x8, v4:2x2x1) or a GPU node (XLA's CUDA compiler: h100:8, "
                    "h100:2x8 = 2 hosts of 8, a100:8, h200:8) to compile for on this "
                    "machine; empty: --devices")
flags.DEFINE_integer("num_slices", 1, "compile: slices of --topology joined over DCN",
                     lower_bound=1)
flags.DEFINE_enum("job", "pretrain", ["pretrain", "finetune"],
                  "compile: the pretraining step or a fine-tuning step (with --task)")
flags.DEFINE_string("task", tasks_table.DEFAULT, "compile --job=finetune: the task type "
                    f"({' | '.join(tasks_table.having('label_fields'))})")
flags.DEFINE_multi_string("finetune_set", [], "compile --job=finetune: a fine-tuning field as "
                          "a run sets it, e.g. mode=lora, lora_rank=16, layer_decay=0.8 "
                          "(encoder/finetune/config.py's finetune section; repeatable)")
flags.DEFINE_bool("unrolled_flops", True, "compile: with a scanned stack, also compile 1- and "
                  "2-layer probes to count the whole step's XLA FLOPs")
FLAGS = flags.FLAGS


def finetune_fields(items) -> dict:
    """['mode=lora', 'lora_rank=16'] -> {'mode': 'lora', 'lora_rank': 16}, each a field of the
    fine-tuning config's finetune section (an unknown one is refused, naming the valid)."""
    from encoder import config as config_lib
    from encoder.finetune import config as finetune_config
    known = finetune_config.finetune_config().finetune
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise app.UsageError(f"--finetune_set={item!r}: expected FIELD=VALUE with FIELD one "
                                 f"of {', '.join(sorted(known))}")
        out[key] = type(known[key])(config_lib.coerce(value))
    return out


def gib_fields(row: dict) -> dict:
    """row with every *_bytes figure also in GiB (3 decimals)."""
    out = dict(row)
    for key, value in row.items():
        if key.endswith("_bytes") and isinstance(value, (int, float)):
            out[key.replace("_bytes", "_gib")] = round(value / 2**30, 3)
    return out


def _hf_row(config, devices, topology: str) -> dict:
    """HF's FlaxBertForMaskedLM train step (benchmarks/hf_reference.py) compiled for the
    same devices, data-parallel (HF has no sharding rules of its own): parameters and
    optimizer state replicated, the batch split over every device."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from benchmarks import hf_reference
    from encoder.aot import chips, compile_report, hlo
    mesh = Mesh(np.asarray(devices), ("data",))
    model = hf_reference.hf_model(config, do_init=False)
    step, tx = hf_reference.hf_train_step(config, model)
    params = jax.eval_shape(lambda r: model.init_weights(r, (1, config.data.seq_len)),
                            jax.random.key(0))
    state = (params, jax.eval_shape(tx.init, params))
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                         state)
    b, t = config.train.batch_size, config.data.seq_len
    batch = {k: jax.ShapeDtypeStruct((b, t), np.int32, sharding=split)
             for k in ("input_ids", "attention_mask", "segment_ids")}
    rng = jax.eval_shape(lambda: jax.random.key(0))
    compiled = jax.jit(step, donate_argnums=(0,), out_shardings=(
        jax.tree.map(lambda x: x.sharding, state), replicated)).lower(state, batch, rng).compile()
    mem = compiled.memory_analysis()
    n = len(devices)
    chip = chips.chip_for_topology(topology) if topology else None
    contents = hlo.program_contents(compiled.as_text())
    row = {"benchmark": "compile", "side": "huggingface FlaxBertForMaskedLM",
           "platform": devices[0].platform, "topology": topology or None, "chips": n,
           "seq_len": t, "global_batch": b, "rows_per_chip": b / n, "dtype": config.model.dtype,
           "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params)),
           "attention_ran": hf_reference.HF_ATTENTION,
           "temp_bytes": int(mem.temp_size_in_bytes),
           "peak_bytes": int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                             - mem.alias_size_in_bytes + mem.temp_size_in_bytes),
           "analytic_flops": hf_reference.hf_train_flops(config) / n, **contents}
    row["fits"] = row["peak_bytes"] <= chip.hbm_bytes if chip else None
    if chip is not None:
        hbm = (compile_report._cost(compiled) or {}).get("bytes accessed")  # noqa: SLF001
        row["step_time"] = compile_report.step_time_estimate(
            chip, compile_report._xla_flops(compiled) or row["analytic_flops"], hbm,  # noqa: SLF001
            contents["collectives"])
    return row


def _fit_rows(one: dict, two: dict, hbm: int | None) -> int | None:
    """Rows per chip that fit: the line through two compiles' peaks (rows r and 2r)."""
    per_row = (two["peak_bytes"] - one["peak_bytes"]) / (two["rows_per_chip"]
                                                         - one["rows_per_chip"])
    fixed = one["peak_bytes"] - per_row * one["rows_per_chip"]
    return int((hbm - fixed) // per_row) if (hbm and per_row > 0) else None


def side_by_side():
    """This codebase's step and HF's, each compiled at --batch_size and twice it on the same
    target, data-parallel, no scan (XLA then counts the whole step): one JSON line per side
    with the peak at --batch_size, the rows per chip that fit, and the step bound."""
    import jax
    from encoder.aot import chips, compile_report
    from benchmarks.common import bench_config
    config = experiment_config() if FLAGS.config is not None else bench_config()
    config.model.scan_layers = "false"
    config.mesh.data, config.mesh.fsdp = -1, 1
    devices = (compile_report.topology_devices(FLAGS.topology, FLAGS.num_slices)
               if FLAGS.topology else None)
    chip = chips.chip_for_topology(FLAGS.topology) if FLAGS.topology else None
    sides = {"this codebase": [], "huggingface FlaxBertForMaskedLM": []}
    for factor in (1, 2):
        c = config.copy_and_resolve_references()
        c.train.batch_size = config.train.batch_size * factor
        ours = compile_report.compile_report(c, True, devices=devices,
                                             topology=FLAGS.topology)
        sides["this codebase"].append({**ours, "side": "this codebase"})
        sides["huggingface FlaxBertForMaskedLM"].append(
            _hf_row(c, devices or jax.devices(), FLAGS.topology))
    for name, (one, two) in sides.items():
        keep = ("side", "platform", "topology", "chips", "seq_len", "rows_per_chip", "dtype",
                "parameters", "attention_ran", "peak_bytes", "temp_bytes", "largest_buffer",
                "largest_buffer_bytes", "fits", "collectives", "step_time")
        out = {k: one.get(k) for k in keep}
        out["rows_per_chip_fit"] = _fit_rows(one, two, chip.hbm_bytes if chip else None)
        out["peak_bytes_at_2x"] = two["peak_bytes"]
        print(json.dumps(gib_fields(out)), flush=True)


def run():
    if FLAGS.devices:  # before anything initialises the CPU backend
        import jax
        jax.config.update("jax_num_cpu_devices", FLAGS.devices)
    if FLAGS.against == "hf":
        return side_by_side()
    if FLAGS.config is None:
        raise app.UsageError("--mode=compile needs --config=experiments/NAME.py[:arg]")
    if FLAGS.topology and FLAGS.devices:
        raise app.UsageError("--topology (TPU chips or GPUs) and --devices (simulated CPU "
                             "devices) are two targets: give one")
    from benchmarks.common import phase_of
    from encoder.aot import compile_report
    if FLAGS["seq_len"].present:  # the recipe's positions, before --seq_len widens them
        compile_report.check_seq_len(FLAGS.config.model, FLAGS.seq_len)
    config = experiment_config()
    row = compile_report.compile_report(
        config, FLAGS.unrolled_flops, topology=FLAGS.topology,
        num_slices=FLAGS.num_slices, job=FLAGS.job, task=FLAGS.task,
        finetune=finetune_fields(FLAGS.finetune_set))
    row["phase"] = phase_of(FLAGS.config, FLAGS.phase)[1]
    row["grad_accum_steps"] = config.train.grad_accum_steps
    print(json.dumps(gib_fields(row)), flush=True)
