"""The fine-tuning step's pieces, built once: the fine-tuning job trains them and the
compile report (`encoder bench --mode=compile --job=finetune`) compiles them.

A task type (encoder/tasks) gives the head, forward and loss; this module adds what
fine-tuning changes around them: LoRA adapters (their parameters beside the model's,
merged on the fly), frozen modes (optax.multi_transform over trainable labels), layer-wise
learning-rate decay, and the model changes those need (per-layer parameters, the
fine-tuning dropout).
"""
import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from encoder.finetune import frozen, layer_decay, lora
from encoder.model import models
from encoder.train import optimizer as optimizer_lib


@dataclasses.dataclass(frozen=True)
class FinetuneStep:
    """What Trainer takes (init_params, loss_fn, tx) and what scoring reads (model,
    effective: the parameters the model applies, LoRA merged in)."""
    model: Any
    init_params: Callable        # rng -> {"model": ..., ["lora": ...]}
    loss_fn: Callable            # (params, batch, rng) -> (loss, {"loss"})
    tx: Any
    train_cfg: Any               # the optimizer's view of config.train (steps, warmup)
    effective: Callable          # params -> the model's parameters


def model_config(config, source_model_cfg):
    """The source's model config as fine-tuning runs it: LoRA and layer decay address each
    blocks_i on its own (an unscanned stack; init_from's merge unstacks a scanned source),
    and the fine-tuning dropout (config.finetune.dropout, resolved) everywhere."""
    cfg = source_model_cfg.copy_and_resolve_references()
    if config.finetune.mode == "lora" or config.finetune.layer_decay < 1.0:
        with cfg.ignore_type():
            cfg.scan_layers = "false"
    if config.finetune.dropout >= 0:
        cfg.dropout = cfg.attention_dropout = config.finetune.dropout
    return cfg


def make_optimizer(config, params, num_layers: int, total_steps: int):
    """AdamW over the trainable leaves (frozen.py), with layer-wise decay if asked;
    returns (tx, the train config it read: num_steps and warmup filled in)."""
    t = config.train.copy_and_resolve_references()
    t.num_steps = total_steps
    t.warmup_steps = int(config.finetune.warmup_fraction * total_steps)
    adamw = optimizer_lib.make_optimizer(t)
    if config.finetune.layer_decay < 1.0:
        adamw = optax.chain(adamw, layer_decay.scale_updates(params, num_layers,
                                                             config.finetune.layer_decay))
    return optax.multi_transform({"train": adamw, "freeze": optax.set_to_zero()},
                                 frozen.trainable_labels(params, config.finetune.mode)), t


def build(config, task, model_cfg, total_steps: int) -> FinetuneStep:
    """The step's pieces for `task` (a Task instance) on model_cfg (see model_config)."""
    f = config.finetune
    model = task.model(models.freeze(model_cfg), config.pooling)
    ids = jnp.ones((1, 8), jnp.int32)
    model_init = lambda rng: model.init(rng, ids, ids * 0, ids)["params"]  # noqa: E731
    shapes = nn.unbox(jax.eval_shape(model_init, jax.random.key(0)))

    def init_params(rng):
        k_model, k_lora = jax.random.split(rng)
        tree = {"model": model_init(k_model)}
        if f.mode == "lora":
            tree["lora"] = lora.init(k_lora, shapes["encoder"], f.lora_rank)
        return tree

    def effective(params):
        return lora.effective(params, f.lora_alpha, f.lora_rank)

    def loss_fn(params, batch, rng):
        out = task.forward(model, effective(params), batch, deterministic=False,
                           rngs={"dropout": rng})
        loss = task.loss(out, batch)
        return loss, {"loss": loss}

    abstract = nn.unbox(jax.eval_shape(init_params, jax.random.key(0)))
    tx, train_cfg = make_optimizer(config, abstract, model_cfg.num_layers, total_steps)
    return FinetuneStep(model, init_params, loss_fn, tx, train_cfg, effective)


def abstract_batch(task_cls, batch_size: int, seq_len: int, sharding) -> dict:
    """ShapeDtypeStructs of one fine-tuning batch of a task type (its label fields)."""
    b, t = batch_size, seq_len
    batch = {k: jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=sharding)
             for k in ("input_ids", "segment_ids", "attention_mask")}
    batch["weight"] = jax.ShapeDtypeStruct((b,), jnp.float32, sharding=sharding)
    for name, shape, dtype in task_cls.label_fields:
        batch[name] = jax.ShapeDtypeStruct((b, *[t if s == "T" else s for s in shape]), dtype,
                                           sharding=sharding)
    return batch
