"""The small pieces of fine-tuning: LoRA, layer-wise decay, trainable sets, task losses."""
import jax
import jax.numpy as jnp
import numpy as np

from encoder.finetune import frozen, layer_decay, lora
from encoder.tasks import contrastive
from encoder.tasks.contrastive import Contrastive


def test_lora_merge_and_trainable_sets():
    params = {"model": {"encoder": {"blocks_0": {"attention": {
        "qkv": {"kernel": jnp.ones((4, 3, 2, 2)), "bias": jnp.zeros((3, 2, 2))},
        "out": {"kernel": jnp.ones((2, 2, 4))}}, "mlp": {"wi": {"kernel": jnp.ones((4, 8))},
                                                     "wo": {"kernel": jnp.ones((8, 4))}}}},
        "head": {"classifier": {"kernel": jnp.ones((4, 2))}}}}
    adapters = lora.init(jax.random.key(0), params["model"]["encoder"], rank=2)
    assert adapters["blocks_0/attention/qkv/kernel"]["a"].shape == (4, 2)
    assert adapters["blocks_0/attention/qkv/kernel"]["b"].shape == (2, 12)
    assert adapters["blocks_0/attention/out/kernel"]["a"].shape == (4, 2)
    merged = lora.merge(params["model"]["encoder"], adapters, 2.0)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), merged,
                                     params["model"]["encoder"]))  # b = 0: no change yet
    adapters["blocks_0/mlp/wo/kernel"]["b"] = jnp.ones((2, 4))
    merged = lora.merge(params["model"]["encoder"], adapters, 2.0)
    delta = merged["blocks_0"]["mlp"]["wo"]["kernel"] - 1.0
    np.testing.assert_allclose(delta, 2.0 * adapters["blocks_0/mlp/wo/kernel"]["a"] @ jnp.ones((2, 4)),
                               rtol=1e-6)
    tree = {**params, "lora": adapters}
    labels = frozen.trainable_labels(tree, "lora")
    assert labels["model"]["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"] == "freeze"
    assert labels["model"]["head"]["classifier"]["kernel"] == "train"
    assert labels["lora"]["blocks_0/mlp/wi/kernel"]["a"] == "train"
    assert frozen.trainable_labels(params, "full")["model"]["encoder"]["blocks_0"]["mlp"][
        "wi"]["kernel"] == "train"


def test_layer_wise_learning_rate_decay():
    tree = {"model": {"encoder": {"embed": {"token": {"embedding": 0.0}},
                                  "blocks_0": {"k": 0.0}, "blocks_1": {"k": 0.0}},
                      "head": {"k": 0.0}}}
    m = layer_decay.multipliers(tree, num_layers=2, decay=0.5)
    assert m["model"]["head"]["k"] == 1.0
    assert m["model"]["encoder"]["blocks_1"]["k"] == 0.5
    assert m["model"]["encoder"]["blocks_0"]["k"] == 0.25
    assert m["model"]["encoder"]["embed"]["token"]["embedding"] == 0.125


def test_contrastive_loss_by_hand():
    a = jnp.eye(3)
    b = jnp.eye(3)
    loss = Contrastive.loss(None, (a / contrastive.SCALE, b), {"weight": jnp.ones(3)})
    expected = -np.log(np.e / (np.e + 2))
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
