"""`encoder bench --mode=compile`: the train step compiled from shapes alone reports memory
that adds up and FLOPs that agree with the analytic count (encoder/train/flops.py)."""
import jax
import pytest

from encoder.data import synthetic
from encoder.aot import compile_report
from encoder import config as config_lib

# XLA counts every op (norms, softmax, GELU, Adam, the masking) and the analytic count
# only the matmuls; measured on the config below: XLA / analytic = 1.18 (BUILD_NOTES.md,
# "Compile report"; the small width makes the non-matmul share large). A factor of 1.5
# either way is the stated agreement.
FLOPS_FACTOR = 1.5


def _config(scan_layers: str, mesh=(1, 1)):
    config = config_lib.base_config()
    config.model.update(dict(vocab_size=512, hidden_size=64, num_heads=4, intermediate_size=256,
                             num_layers=2, max_position=64, scan_layers=scan_layers))
    config.data.seq_len = 64
    config.train.batch_size = 8
    config.mesh.data, config.mesh.fsdp = mesh
    return config


@pytest.fixture(scope="module")
def unrolled_row():
    """The unrolled config's report on one device: both tests read the same row (one
    compile of the step, not two)."""
    return compile_report.compile_report(_config("false"), devices=jax.devices()[:1])


def test_compile_report_memory_and_flops(unrolled_row):
    row = unrolled_row
    n = row["parameters"]
    assert row["param_bytes"] == 4 * n  # float32, one device
    assert row["optimizer_bytes"] >= 2 * row["param_bytes"]  # Adam's two moments
    assert row["temp_bytes"] > 0
    assert row["peak_bytes"] >= row["param_bytes"] + row["optimizer_bytes"] + row["temp_bytes"]
    assert 1 / FLOPS_FACTOR < row["xla_over_analytic"] < FLOPS_FACTOR, row
    assert row["xla_flops_unrolled"] == row["xla_flops"]
    # what the step compiled to, not what was asked: dropout 0.1 trains on the reference path; the
    # init's deterministic forward pass (traced for the shapes) is not the step's
    assert row["attention_ran"] == "reference (attention dropout)", row["attention_ran"]


def test_compile_report_counts_a_scanned_stack_whole_and_shards_memory(unrolled_row):
    """XLA counts a scanned loop's body once; the 1-/2-layer probes restore the whole
    step's count, which equals the unrolled model's. On 8 devices (fsdp=4) each holds
    about a quarter of the parameters."""
    unrolled = unrolled_row
    scanned = compile_report.compile_report(_config("true", mesh=(2, 4)))
    assert scanned["scan_groups"] == 2 and scanned["devices"] == 8
    assert scanned["xla_flops"] < scanned["xla_flops_unrolled"]
    # the same global work, now over 8 devices (the batch split 8 ways)
    assert abs(scanned["xla_flops_unrolled"] * 8 / unrolled["xla_flops"] - 1) < 0.05
    assert 1 / FLOPS_FACTOR < scanned["xla_over_analytic"] < FLOPS_FACTOR
    full = 4 * unrolled["parameters"]
    assert full / 4 <= scanned["param_bytes"] < full / 3  # 'embed' split 4 ways (+ replicas)


def test_bench_batches_pack_documents_like_pretraining():
    import numpy as np
    config = _config("false")
    config.data.update(dict(document_mask=True, restart_positions=True, seq_len=64))
    batch = synthetic.random_batch(config, documents=4)
    assert batch["document_ids"].shape == (8, 64)
    assert sorted(set(batch["document_ids"][0].tolist())) == [1, 2, 3, 4]
    # positions restart at every document start, as packed pretraining rows have them
    starts = np.flatnonzero(np.diff(batch["document_ids"][0])) + 1
    assert batch["positions"][0, 0] == 0 and all(batch["positions"][0, starts] == 0)
    config.data.document_mask = False
    assert "document_ids" not in synthetic.random_batch(config)


def test_word_masking_recipes_compile_from_shapes():
    """Span (and whole-word) masking read the tokenizer's word table; a compile from shapes
    (no tokenizer: ALBERT's recipe on a TPU topology, say) gets a table of the model's
    vocabulary instead of refusing."""
    config = _config("false")
    config.masking.mode = "span"
    row = compile_report.compile_report(config, devices=jax.devices()[:1])
    assert row["fits"] is not False and row["temp_bytes"] > 0 and row["xla_flops"] > 0


def test_a_lora_finetuning_step_compiles_as_the_job_trains_it():
    """--job=finetune builds its step with the fine-tuning job's own builder
    (encoder/train/finetune_step.py): LoRA adds its adapters beside the model's
    parameters and Adam keeps moments for the adapters alone; a frozen encoder keeps
    moments for the head alone."""
    config = _config("true")
    full, lora, frozen = (compile_report.compile_report(
        config, False, devices=jax.devices()[:1], job="finetune", task="classification",
        finetune=ft) for ft in ({}, {"mode": "lora", "lora_rank": 4}, {"mode": "frozen"}))
    assert full["finetune"] == {} and lora["finetune"] == {"mode": "lora", "lora_rank": 4}
    # rank-4 adapters on every attention and MLP matrix of 2 layers: a few thousand numbers
    assert 0 < lora["parameters"] - full["parameters"] < 0.2 * full["parameters"]
    assert lora["optimizer_bytes"] < 0.25 * full["optimizer_bytes"]
    assert frozen["optimizer_bytes"] < lora["optimizer_bytes"]
    # LoRA addresses each layer's matrices: the step runs the stack unscanned (as the job)
    assert lora["scan_layers"] == "false" and full["scan_layers"] == "true"


def test_a_target_that_counts_no_flops_gives_none_not_a_traceback(monkeypatch):
    """GPU compilers (deviceless) report no FLOPs: the scanned stack's 1- and 2-layer probe
    compiles then have nothing to extrapolate, and the report says None (it raised a
    TypeError on `bench --mode=compile --config=experiments/bert_base.py --topology=h200:1`)."""
    compiled = []
    monkeypatch.setattr(compile_report, "compile_step",
                        lambda probe, *a, **k: compiled.append(probe.model.num_layers) or ("c",))
    monkeypatch.setattr(compile_report, "_xla_flops", lambda c: None)
    assert compile_report.unrolled_xla_flops(_config("true")) is None
    assert compiled == [1, 2]
    # 1 layer counts 10, 2 layers 16: each layer 6
    monkeypatch.setattr(compile_report, "_xla_flops", lambda c: 10.0 + 6.0 * (len(compiled) - 1))
    compiled.clear()
    cfg = _config("true")
    cfg.model.num_layers = 12
    assert compile_report.unrolled_xla_flops(cfg) == 10.0 + 11 * 6.0  # count(1) + 11 x per layer


def test_a_batch_that_does_not_split_over_the_devices_is_one_line():
    """(It once surfaced as jax's NamedSharding message.)"""
    from encoder import errors
    cfg = _config("false", mesh=(8, 1))
    cfg.train.batch_size = 12
    with pytest.raises(errors.UsageError, match=r"--batch_size=12 does not split over the 8 "
                                                r"devices .* give a multiple of 8"):
        compile_report.compile_report(cfg, devices=jax.devices()[:8])
