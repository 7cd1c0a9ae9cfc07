"""The objective registry: name -> (model builder, loss function).

`prepare(batch, rng, ctx)` corrupts a batch on device (once per step);
`loss_fn(params, prepared_batch, rng, ctx, deterministic) -> (loss, metrics)`; `ctx` (an ObjectiveContext) carries the
model module, the config and the tokenizer constants the corruption needs.
"""
import dataclasses
from typing import Any, Callable

import numpy as np

from encoder import config as config_lib, registry
from encoder.model import models
from encoder.objectives import masking, mlm, rtd
from encoder.objectives.rtd import generator_config  # noqa: F401 (its home is rtd.py)


def build_mlm(config):
    return models.MaskedLM(models.freeze(config.model), pair_head=config.pair_task != "none")


def build_rtd(config):
    e = config.electra
    return models.Electra(models.freeze(config.model), models.freeze(
        generator_config(config.model, e.generator_fraction, e.generator_layers)))


@dataclasses.dataclass(frozen=True)
class Objective:
    """A training game, everything about it in one row: adding an objective is its own
    file and its row here."""
    build_model: Callable[[Any], Any]
    prepare: Callable               # (batch, rng, ctx) -> the corrupted batch, on device
    loss_fn: Callable               # (params, batch, rng, ctx, deterministic) -> (loss, metrics)
    eval_keys: tuple[str, ...]      # metrics reported under eval/
    forward_flops: Callable         # (config, batch, seq_len, predictions per row) -> FLOPs
    summary: Callable               # a run's result -> its closing lines
    pretraining_only: tuple = ()    # parameter subtrees left out of the published count


OBJECTIVES: dict[str, Objective] = {
    "mlm": Objective(build_mlm, mlm.prepare, mlm.loss_fn,
                     ("loss", "mlm_loss", "mlm_accuracy", "mlm_baseline_accuracy",
                      "pair_accuracy"), mlm.forward_flops, mlm.summary),
    "rtd": Objective(build_rtd, mlm.prepare, rtd.loss_fn,
                     ("loss", "gen_loss", "mlm_accuracy", "rtd_loss", "rtd_accuracy",
                      "rtd_baseline_accuracy", "rtd_precision", "rtd_recall"),
                     rtd.forward_flops, rtd.summary, ("generator", "generator_head")),
}


PAIR_TASKS = ("none", "nsp", "sop")


def summary(config, result: dict) -> list[str]:
    """The closing lines of a pretraining run's result, as its objective writes them."""
    return list(OBJECTIVES[config.objective].summary(result))


def validate(config) -> None:
    """Checks a pretraining config's model, pooling, objective and masking before compiling."""
    models.validate_config(config.model, config.data.seq_len)
    models.validate_pooling(config.pooling)
    registry.lookup(OBJECTIVES, config.objective, "objective")
    registry.lookup(masking.MASKING_MODES, config.masking.mode, "masking mode")
    registry.lookup(dict.fromkeys(PAIR_TASKS), config.pair_task, "pair task")
    m = config.masking
    if not 0 < m.rate < 1:
        raise ValueError(f"masking.rate must be in (0, 1), got {m.rate}")
    if m.mask_prob < 0 or m.random_prob < 0 or m.mask_prob + m.random_prob > 1:
        raise ValueError(f"masking.mask_prob + random_prob must be within [0, 1], "
                         f"got {m.mask_prob} + {m.random_prob}")
    if config.pair_task != "none" and config.data.pack_mode != "pairs":
        raise ValueError(f"pair_task={config.pair_task} needs data.pack_mode='pairs'")
    if config.objective == "rtd" and not 0 < config.electra.generator_fraction <= 1:
        raise ValueError("electra.generator_fraction must be in (0, 1], got "
                         f"{config.electra.generator_fraction}")
    if config.objective == "rtd":
        _check_generator(config)


def _check_generator(config) -> None:
    """The generator is sized from the discriminator (rtd.generator_config), not by the user:
    a size it cannot take is named as the generator's, with the fraction that makes it."""
    m, e = config.model, config.electra
    gen = generator_config(m, e.generator_fraction, e.generator_layers)
    gen.embedding_size = 0  # the generator reads the shared E-wide tables through its own
    try:                    # projection: E past its width is ELECTRA's design, not an error
        models.validate_config(gen)
    except ValueError as err:
        raise ValueError(
            f"the ELECTRA generator sized from electra.generator_fraction="
            f"{e.generator_fraction:g} x model.hidden_size={m.hidden_size} (width "
            f"{gen.hidden_size}, {gen.num_heads} head(s) of {gen.hidden_size // gen.num_heads})"
            f" cannot be built: {err}; choose another electra.generator_fraction") from None


@dataclasses.dataclass(frozen=True, eq=False)
class ObjectiveContext:
    """Everything a loss function reads besides params, batch and rng."""
    config: Any
    model: Any
    special_ids: tuple[int, ...]
    mask_id: int
    word_start_table: np.ndarray | None
    most_frequent_id: int
    max_predictions: int


def make_context(config, tokenizer, most_frequent_id: int) -> ObjectiveContext:
    objective = OBJECTIVES[config.objective]
    return ObjectiveContext(
        config=config, model=objective.build_model(config), special_ids=tokenizer.special_ids,
        mask_id=tokenizer.mask_id,
        word_start_table=tokenizer.word_start_table() if config.masking.mode != "token" else None,
        most_frequent_id=most_frequent_id,
        max_predictions=config_lib.max_predictions(config.data.seq_len, config.masking.rate))


def parameter_count(config) -> tuple[int, int]:
    """(all parameters, the model's published-style count) via eval_shape, nothing allocated.

    The published count leaves out ELECTRA's generator (the paper reports the
    discriminator), and keeps heads, as BERT's 110M does.
    """
    import jax
    import jax.numpy as jnp
    model = OBJECTIVES[config.objective].build_model(config)
    ids = jnp.ones((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids * 0, ids,
                                               mlm_positions=jnp.zeros((1, 2), jnp.int32)))
    params = shapes["params"]
    size = lambda tree: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))
    total = size(params)
    published = total - sum(size(params[k]) for k in OBJECTIVES[config.objective].pretraining_only
                            if k in params)
    return total, published
