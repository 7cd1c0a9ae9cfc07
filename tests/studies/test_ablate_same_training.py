"""`encoder ablate` ranks only what differs in training: a sweep of a field that changes how
a run is carried out (its logging window, checkpoint cadence, kernel, mesh) is refused, and
a study of one variant names no "best"."""
import pytest

from encoder import errors
from encoder.studies import ablation


def _base():
    from experiments import pretrain as pretrain_exp
    return pretrain_exp.get_config("runlocal")


@pytest.mark.parametrize("field", ["train.log_every", "config.train.log_every",
                                   "model.attention_impl", "train.grad_accum_steps",
                                   "mesh.fsdp"])
def test_a_sweep_that_trains_one_model_is_refused(field):
    with pytest.raises(errors.UsageError) as e:
        ablation.check_sweeps([ablation.parse_sweep(f"{field}=1,2")], _base())
    assert str(e.value).startswith(f"--sweep={field}=...: ")
    assert "not what it trains" in str(e.value) and "--config." in str(e.value)


def test_what_changes_the_training_is_swept_as_before():
    ablation.check_sweeps([ablation.parse_sweep("train.learning_rate=1e-3,2e-3"),
                           ablation.parse_sweep("train.debug_nan_at_step=-1,2")], _base())


def test_one_variant_is_no_best(tmp_path):
    rows = [{"variant": "objective=mlm", "seed": s, "dir": f"v__seed{s}", "objective": "mlm",
             "steps": 4, "checkpoint_step": 4, "final_train_loss": 5.0, "tokens_per_s": 1.0,
             "flops": 1e9, "parameters": 10, "curve": [(1, 6.0)],
             "eval/mlm_accuracy": 0.3 + s / 100} for s in (0, 1)]
    table = ablation.write_results(rows, str(tmp_path))
    assert [e["verdict"] for e in table] == ["one variant"]
    text = (tmp_path / "results.md").read_text()
    assert "| best |" not in text and "one variant" in text
