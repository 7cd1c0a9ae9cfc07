"""Every experiment builds (runlocal), and each recipe has its published size."""
import glob
import importlib
import os

import jax
import jax.numpy as jnp
import pytest

from encoder import config as config_lib
from encoder.objectives import objectives
from encoder.jobs import pretrain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
             if not p.endswith("__init__.py"))
DOWNSTREAM = ("finetune", "evaluate", "embed")  # config.mode experiments, not pretraining
FROM_SOURCE = ("continue",)  # the model comes from init_from (tests/e2e/test_continue.py)
EXPERIMENTS = [e for e in ALL if e not in DOWNSTREAM + FROM_SOURCE]
PUBLISHED = {  # millions of parameters, as the papers report them
    "bert_base": 110, "roberta_base": 125, "electra_small": 14, "electra_base": 110,
    "albert_base": 12, "modernbert_base": 149, "mosaicbert_base": 137,
    "deberta_v3_base": 184,  # 86M backbone + 98M embedding (He et al. 2023)
}


def load(name, arg=None):
    return importlib.import_module(f"experiments.{name}").get_config(arg)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_builds_with_runlocal(name):
    config = load(name, "runlocal")
    pretrain.validate(config)
    objective = objectives.OBJECTIVES[config.objective]
    model = objective.build_model(config)
    b, t = 2, config.data.seq_len
    batch = {"input_ids": jnp.full((b, t), 7, jnp.int32), "attention_mask": jnp.ones((b, t)),
             "segment_ids": jnp.zeros((b, t), jnp.int32),
             "positions": jnp.broadcast_to(jnp.arange(t), (b, t)),
             "document_ids": jnp.ones((b, t), jnp.int32), "pair_labels": jnp.zeros(b, jnp.int32)}
    ctx = objectives.ObjectiveContext(config, model, (0, 1, 2, 3, 4), 4,
                                      jnp.ones(config.model.vocab_size, bool), 5,
                                      config_lib.max_predictions(t, config.masking.rate))

    def loss(rng):
        params = model.init(rng, batch["input_ids"], mlm_positions=jnp.zeros((b, 2), jnp.int32),
                            segment_ids=None, attention_mask=None)["params"]
        import flax.linen as nn
        prepared = objective.prepare(batch, rng, ctx)
        return objective.loss_fn(nn.unbox(params), prepared, rng, ctx)

    value, metrics = jax.eval_shape(loss, jax.random.key(0))
    assert value.shape == () and "loss" in metrics


@pytest.mark.parametrize("name,arg,pooling", [("evaluate", "runlocal", "cls"),
                                               ("embed", None, "mean"),
                                               ("embed", "pooling=cls", "cls")])
def test_evaluate_and_embed_experiments_pick_their_mode(name, arg, pooling):
    config = load(name, arg)
    assert config.mode == name and config.pooling == pooling
    if name == "evaluate":
        assert config.eval.max_tokens == 2000  # runlocal shrinks the budget


def _task_names():
    from encoder.tasks.table import TASKS
    return sorted(TASKS)


@pytest.mark.parametrize("task", _task_names())
def test_finetune_experiment_builds_every_task_model(task):
    from encoder.tasks.table import TASKS
    from encoder.model.models import freeze
    c = load("finetune", f"task={task},mode=lora,runlocal")
    assert (c.mode, c.task, c.finetune.mode, c.data.max_seq_len) == ("finetune", task, "lora", 64)
    assert c.pooling == ("mean" if task == "contrastive" else "cls")
    model = TASKS[task].model_cls(freeze(c.model), 3, c.pooling)
    ids = jnp.ones((2, c.data.max_seq_len), jnp.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids * 0, ids))
    assert "encoder" in shapes["params"]
    assert ("head" in shapes["params"]) == (task != "contrastive")  # mean pooling: no params
    with pytest.raises(ValueError, match="valid names: .*mode.*task"):
        load("finetune", "taks=qa")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_recipe_parameter_count_matches_the_paper(name):
    _, count = objectives.parameter_count(load(name))
    assert abs(count / 1e6 - PUBLISHED[name]) / PUBLISHED[name] < 0.04, count


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid names: .*objective.*position"):
        load("pretrain", "positon=rope")


def test_arg_overrides_the_recipe():
    config = load("bert_base", "position=rope,size=tiny")
    assert config.model.position == "rope" and config.model.hidden_size == 128
    assert config.model.vocab_size == 30522


def test_continue_offers_only_pretraining_recipes():
    import importlib
    cont = importlib.import_module("experiments.continue")
    names = cont.recipes()
    assert "modernbert_base" in names and "pretrain" in names
    assert not {"finetune", "evaluate", "embed", "continue"} & set(names)
    with pytest.raises(ValueError, match=r"experiments/finetune.py is a finetune experiment, "
                                         r"not a pretraining recipe; recipes: albert_base"):
        cont.get_config("recipe=finetune")


def test_an_explicit_step_count_survives_runlocal():
    from experiments import pretrain as exp
    assert exp.get_config("steps=5,runlocal").train.num_steps == 5
    assert exp.get_config("runlocal,steps=7").train.num_steps == 7
    assert exp.get_config("runlocal").train.num_steps == 20


# What an experiment file may import: the config modules (plain data), other experiment
# files, and what they are written in. A name here maps to why it is allowed.
PLAIN = {"encoder.config", "encoder.finetune.config", "ml_collections", "experiments",
         "importlib", "os", "math"}
# pretrain.py's evals= option expands suite task names through the evaluator table of
# encoder/jobs/evals.py (which imports no jax: the loading test below holds that); it
# leaves this list when that table's declaration half moves into encoder/config.py
BEYOND_PLAIN = {"pretrain": {"encoder.jobs"}}
HEAVY = ("jax", "jaxlib", "optax", "flax", "orbax", "grain", "numpy", "torch")


def _imports(path: str) -> set[str]:
    import ast
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


@pytest.mark.parametrize("name", ALL)
def test_an_experiment_file_imports_only_the_config(name):
    allowed = PLAIN | BEYOND_PLAIN.get(name, set())
    beyond = sorted(m for m in _imports(os.path.join(ROOT, "experiments", f"{name}.py"))
                    if not any(m == a or m.startswith(a + ".") for a in allowed))
    assert not beyond, f"experiments/{name}.py imports {beyond}: a recipe is plain data"


def test_every_experiment_loads_without_jax():
    """Each experiment file is loaded and its config built (as given and at runlocal) in a
    process of its own, one after another: the first that brings in jax, optax, flax (or
    numpy) is named."""
    import json
    import subprocess
    import sys
    code = f"""
import importlib, json, sys
heavy = {HEAVY!r}
for name in {ALL!r}:
    module = importlib.import_module("experiments." + name)
    for arg in (None, "runlocal"):
        module.get_config(arg)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
    if loaded:
        print(json.dumps([name, loaded[:5]]))
        break
else:
    print(json.dumps([None, []]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert first is None, f"loading experiments/{first}.py brought in {loaded}"
