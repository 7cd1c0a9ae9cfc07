"""A phased recipe's step is compiled as one phase runs it (bench --mode=compile --phase)."""
import importlib

import pytest

from benchmarks.common import phase_of
from encoder import errors


def _config(name, arg=None):
    return importlib.import_module(f"experiments.{name}").get_config(arg)


def test_each_phase_of_modernbert_compiles_as_it_runs():
    base = _config("modernbert_base")
    stable, name = phase_of(base, "")  # default: the first phase
    assert name == "stable"
    assert stable.data.seq_len == 1024 and stable.train.grad_accum_steps == 6
    assert stable.model.rope_theta == 10000.0
    # at the phase's full batch: the warmup's smaller steps run the same micro-batches
    assert stable.train.batch_warmup_tokens == 0 and stable.train.batch_size == 4608
    ext, name = phase_of(base, "extension")
    assert name == "extension" and ext.data.seq_len == 8192
    assert ext.train.batch_size == 576 and ext.train.grad_accum_steps == 1
    assert ext.model.rope_theta == 160000.0 and tuple(ext.phases) == ()
    assert base.data.seq_len == 1024  # the recipe itself is untouched


def test_an_unknown_phase_names_the_phases():
    with pytest.raises(errors.UsageError, match="phases are stable, extension, decay"):
        phase_of(_config("modernbert_base"), "anneal")
    with pytest.raises(errors.UsageError, match="has no phases"):
        phase_of(_config("bert_base"), "decay")
    config, name = phase_of(_config("bert_base"), "")
    assert name == "main" and config.data.seq_len == _config("bert_base").data.seq_len
