"""A non-finite loss or gradient stops the run in one line (encoder/errors.py non_finite):
its step, the checkpoint a restart would take, the likely causes in order; exit 1 through
the commands' one-line wrapper, never a traceback."""
import math

import jax.numpy as jnp
import pytest

from encoder import errors
from encoder.train import loop


def _window(last=None):
    return loop.Window(lambda: last, "/runs/x", None)


def test_a_non_finite_loss_names_its_step_the_checkpoint_and_the_causes_in_order():
    window = _window(40)
    window.add(41, {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(2.0)})
    window.add(42, {"loss": jnp.float32(math.nan), "grad_norm": jnp.float32(2.0)})
    with pytest.raises(errors.NonFinite) as stop:
        window.absorb()
    text = str(stop.value)
    assert text.startswith("non-finite loss (nan) at step 42; stopping. The last good "
                           "checkpoint (step 40) in /runs/x is intact.")
    # what goes in first (a source's weights, the data), then the step sizes
    order = [text.index(w) for w in ("inputs or weights", "train.learning_rate",
                                     "train.warmup_steps", "train.clip_norm")]
    assert order == sorted(order) and "\n" not in text
    assert isinstance(stop.value, FloatingPointError) and errors.is_user_facing(stop.value)


def test_a_non_finite_gradient_stops_before_its_update_is_saved():
    window = _window()
    window.add(3, {"loss": jnp.float32(2.5), "grad_norm": jnp.float32(math.inf)})
    with pytest.raises(errors.NonFinite, match=r"non-finite gradient norm \(inf\) at step 3; "
                                               r"stopping\. No checkpoint was saved before it"):
        window.absorb()
    assert window.steps == 0  # nothing of the bad step reached the averages


def test_a_finite_window_is_averaged_as_before():
    window = _window()
    window.add(1, {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(3.0)})
    window.add(2, {"loss": jnp.float32(3.0), "grad_norm": jnp.float32(5.0)})
    window.absorb()
    means, _, _ = window.take()
    assert means == {"loss": 2.0, "grad_norm": 4.0}


def test_the_stop_ends_a_command_in_one_line_with_exit_1(capsys):
    from encoder.commands.one_line import one_line_errors

    def main(argv):
        window = _window(5)
        window.add(8, {"loss": jnp.float32(math.nan)})
        window.absorb()
    with pytest.raises(SystemExit) as done:
        one_line_errors(main, name="run")([])
    code = done.value.code  # a string code: printed on stderr, exit status 1
    assert isinstance(code, str) and "\n" not in code
    assert code.startswith("error: run: non-finite loss (nan) at step 8; stopping. The last "
                           "good checkpoint (step 5)")
    assert "Traceback" not in capsys.readouterr().err


def test_a_row_with_a_non_finite_figure_stops_naming_it():
    errors.stop_if_non_finite({"eval/mlm_accuracy": 0.1, "eval/mlm_loss": 3.2}, 0, "w")
    with pytest.raises(errors.NonFinite, match=r"non-finite eval/mlm_loss \(nan\) at step 0"):
        errors.stop_if_non_finite({"eval/mlm_accuracy": 0.1, "eval/mlm_loss": math.nan}, 0, "w")
