"""The PyTorch reference (benchmarks/torch_reference.py) trains what this codebase trains:
the same parameter count for BERT- and ModernBERT-shaped models, HF's masking rule at the
configured rate on real tokens only, this codebase's learning rates and decay mask."""
import numpy as np
import pytest
from absl import flags

import encoder.commands.bench  # noqa: F401 - declares the benchmark flags
from benchmarks import torch_reference as tr
from encoder import config as config_lib
from encoder.objectives import objectives
from helpers import TORCH_GROUP

pytestmark = TORCH_GROUP
torch = pytest.importorskip("torch")


def _bert(size="tiny", vocab=512):
    config = config_lib.base_config()
    config_lib.OPTIONS["size"](config, size)
    config.model.vocab_size = vocab
    return config


def _modernbert():
    import importlib
    config = importlib.import_module("experiments.modernbert_base").get_config("size=tiny")
    config.model.vocab_size = 512
    return config


@pytest.mark.parametrize("make, cls", [(_bert, "BertForMaskedLM"),
                                       (_modernbert, "ModernBertForMaskedLM")])
def test_the_torch_model_has_this_codebases_parameter_count(make, cls):
    config = make()
    model = tr.build_model(config, "cpu", "sdpa")
    assert type(model).__name__ == cls
    assert tr.parameter_count(model) == objectives.parameter_count(config)[0]


def test_masking_selects_real_non_special_tokens_at_the_rate():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 512, (64, 128), generator=gen)
    ids[:, 0] = 2                     # [CLS]: special, never selected
    mask = torch.ones_like(ids)
    mask[:, 100:] = 0                 # padding: never selected
    corrupted, labels = tr.mask_tokens(ids, mask, gen, rate=0.15, mask_prob=0.8,
                                       random_prob=0.1, mask_id=4, first_random=5,
                                       vocab_size=512)
    selected = labels != -100
    assert not selected[:, 0].any() and not selected[:, 100:].any()
    share = selected.sum().item() / (64 * 99)
    assert 0.13 < share < 0.17, share
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(corrupted[~selected], ids[~selected])
    masked = (corrupted[selected] == 4).float().mean().item()
    assert 0.75 < masked < 0.85, masked


def test_learning_rates_are_this_codebases_schedule():
    from encoder.train import optimizer
    config = _bert()
    config.train.update(warmup_steps=3, num_steps=10, learning_rate=1e-3)
    lrs = tr.learning_rates(config, 10)
    schedule = optimizer.learning_rate_schedule(config.train)
    assert np.allclose(lrs, [float(schedule(i)) for i in range(10)])
    assert lrs[0] < lrs[3] and lrs[9] < lrs[3]


def test_weight_decay_falls_on_matrices_only():
    model = tr.build_model(_bert(), "cpu", "sdpa")
    decay, rest = tr.decay_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and rest["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in rest["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))


def test_the_against_flag_names_are_the_step_benchmarks_sides():
    from benchmarks import step
    assert set(step.AGAINST) == set(flags.FLAGS["against"].parser.enum_values)
    assert step.AGAINST["torch"] == ("torch", "torch_compiled")
