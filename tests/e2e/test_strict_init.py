"""init_from loads strictly: the model a config builds must be the source's (the fields
that change its function), its tokenizer the source's, and every tensor of either side is
accounted for; the run's first metrics row is the source's own held-out figure."""
import json
import os

import jax
import pytest

from encoder.checkpoints import sources
from encoder.jobs import pretrain
from helpers import tiny_pretrain_config

pytestmark = pytest.mark.e2e


def _rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _continued(tiny_pretrained, **model):
    config = tiny_pretrain_config(num_steps=2, checkpoint_every=2)
    config.init_from = tiny_pretrained
    config.data.tokenizer = os.path.join(tiny_pretrained, "tokenizer", "sp.model")
    config.model.update(model)
    return config


@pytest.mark.parametrize("field,value", [("position", "learned"), ("norm", "pre_ln")])
def test_a_model_that_computes_another_function_is_refused(tiny_pretrained, tmp_path, field,
                                                           value):
    """BERT-style weights into a RoPE model (the learned table dropped), or post-LN weights
    read as pre-LN (same names, another function): both loaded silently before."""
    config = _continued(tiny_pretrained, **{field: value})
    with pytest.raises(ValueError, match=rf"model.{field}: '{value}' here, .* in the source"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])
    config.init_allow = field  # named knowingly; every tensor must still be accounted for
    with pytest.raises(ValueError, match=r"/encoder/(final_norm|embed/position).* \(the source "
                                         r"lacks it\)"):
        pretrain.train(config, str(tmp_path / "allowed"), devices=jax.devices()[:1])
    if field == "norm":  # pre-LN's final norm may start fresh when named: then it runs
        config.init_fresh = "encoder/final_norm"
        pretrain.train(config, str(tmp_path / "fresh"), devices=jax.devices()[:1])
        assert os.path.exists(tmp_path / "fresh" / "checkpoints")


def test_another_tokenizer_is_refused_naming_both(tiny_pretrained, tmp_path):
    from encoder.data import tokenizer as tokenizer_lib
    from encoder.data import embedded_tasks  # noqa: F401  (the stdlib text is at hand)
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"document {i} about other words entirely, numbered {i * 7}"
                                for i in range(400)))
    other = tokenizer_lib.train_sentencepiece([text.read_text()], str(tmp_path / "other"), 200)
    config = _continued(tiny_pretrained)
    config.data.tokenizer = other
    with pytest.raises(ValueError, match=r"another tokenizer than data.tokenizer=.*fingerprints"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])


def test_the_run_starts_where_the_source_was(tmp_path):
    """A source trained with a held-out evaluation at its last step; a run from it starts
    with the same figure at step 0 (same held-out rows, same masks): the parameters arrived
    whole. Every tensor loaded, none fresh, none unused."""
    source = tiny_pretrain_config(num_steps=4, checkpoint_every=4, eval_every=4)
    pretrain.train(source, str(tmp_path / "src"), devices=jax.devices()[:1])
    last = _rows(str(tmp_path / "src"))[-1]
    config = tiny_pretrain_config(num_steps=2, checkpoint_every=2, eval_every=2)
    config.init_from = str(tmp_path / "src")
    config.data.tokenizer = os.path.join(str(tmp_path / "src"), "tokenizer", "sp.model")
    pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])
    first = _rows(str(tmp_path / "wd"))[0]
    assert first["step"] == 0
    for key in ("eval/mlm_loss", "eval/mlm_accuracy"):
        assert first[key] == pytest.approx(last[key], abs=1e-5), key


def test_the_load_report_accounts_for_every_tensor():
    import numpy as np
    model = {"encoder": {"w": np.zeros(2)}, "pair": {"w": np.zeros(2)}}
    loaded = {"encoder": {"w": np.ones(2)}, "pooler": {"dense": np.ones(2)},
              "extra": {"b": np.ones(3)}}
    rep = sources.LoadReport()
    out = sources.merge_params(model, loaded, report=rep)
    assert out["encoder"]["w"].tolist() == [1, 1] and out["pair"]["w"].tolist() == [0, 0]
    assert rep.loaded == ["/encoder/w"] and rep.fresh == ["/pair/w"]
    assert rep.unused == ["/pooler/dense", "/extra/b"]
    rules = {"pair": "a new head"}, {"pooler": "feeds only a pair head"}
    with pytest.raises(ValueError, match=r"/extra/b \(the model has no place for it\)"):
        rep.check("SRC", *rules)
    # a whole missing half reads as one group, not a list of every tensor
    rep2 = sources.LoadReport(fresh=[f"/generator/l{i}" for i in range(5)] + ["/emb/norm"])
    with pytest.raises(ValueError) as e:
        rep2.check("SRC", {}, {})
    assert ("does not fit this model: 5 tensors under /generator (the source lacks them), "
            "1 tensor under /emb (the source lacks it) (first: /generator/l0 (the source "
            "lacks it);") in str(e.value), str(e.value)
    said = rep.check("SRC", *rules, allowed="extra")
    assert said == ["fresh: a new head", "unused: feeds only a pair head",
                    "unused: --config.init_fresh"]


def test_a_workdir_checkpoint_by_step(tmp_path):
    """WORKDIR@STEP is that checkpoint (what a watcher scores); another step is named."""
    config = tiny_pretrain_config(num_steps=4, checkpoint_every=2, keep_checkpoints=3)
    pretrain.train(config, str(tmp_path / "src"), devices=jax.devices()[:1])
    two, four = sources.load(f"{tmp_path / 'src'}@2"), sources.load(str(tmp_path / "src"))
    leaf = lambda p: jax.tree.leaves(p.params["encoder"])[0]  # noqa: E731
    assert not (leaf(two) == leaf(four)).all()
    assert (leaf(sources.load(f"{tmp_path / 'src'}@4")) == leaf(four)).all()
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 3 \(it has \[2, 4\]\)"):
        sources.load(f"{tmp_path / 'src'}@3")


def test_init_fresh_restarts_what_it_names_and_refuses_a_typo():
    """init_fresh once only permitted a missing tensor; a prefix the source
    has was loaded anyway, and a misspelt one was accepted."""
    import numpy as np
    model = {"encoder": {"blocks_0": {"w": np.zeros(2)}, "blocks_1": {"w": np.zeros(2)}},
             "mlm_head": {"b": np.zeros(3)}}
    loaded = {"encoder": {"blocks_0": {"w": np.ones(2)}, "blocks_1": {"w": np.ones(2)}},
              "mlm_head": {"b": np.ones(3)}}
    rep = sources.LoadReport()
    out = sources.merge_params(model, loaded, report=rep, fresh=("encoder/blocks_1",))
    assert out["encoder"]["blocks_0"]["w"].tolist() == [1, 1]
    assert out["encoder"]["blocks_1"]["w"].tolist() == [0, 0]  # the model's own init
    assert rep.reset == ["/encoder/blocks_1/w"] and "/encoder/blocks_1/w" not in rep.loaded
    assert "started fresh by init_fresh: /encoder/blocks_1/w" in rep.summary("SRC")
    rep.check("SRC", {}, {}, allowed="encoder/blocks_1")
    with pytest.raises(ValueError, match=r"init_fresh=encoder/blocks_9: no parameter of the "
                                         r"model or of SRC lies under it; its paths start "
                                         r"encoder/blocks_0, encoder/blocks_1, mlm_head/b"):
        rep.check("SRC", {}, {}, allowed="encoder/blocks_1,encoder/blocks_9")


def test_a_run_starts_from_a_workdir_checkpoint_by_step(tmp_path):
    """init_from=WORKDIR@STEP (what the watcher and the suite name) for pretraining: its
    tokenizer check, its parameters and, with init_state=full, its whole state."""
    config = tiny_pretrain_config(num_steps=4, checkpoint_every=2, keep_checkpoints=3,
                                  log_every=1)
    src = str(tmp_path / "src")
    pretrain.train(config, src, devices=jax.devices()[:1])
    go = tiny_pretrain_config(num_steps=2, checkpoint_every=2, eval_every=2)
    go.init_from = f"{src}@2"
    go.data.tokenizer = os.path.join(src, "tokenizer", "sp.model")
    pretrain.train(go, str(tmp_path / "from2"), devices=jax.devices()[:1])
    full = tiny_pretrain_config(num_steps=4, checkpoint_every=2, log_every=1)
    full.init_from, full.init_state = f"{src}@2", "full"
    full.data.tokenizer = go.data.tokenizer
    pretrain.train(full, str(tmp_path / "full"), devices=jax.devices()[:1])
    losses = {d: [r["train/loss"] for r in _rows(str(tmp_path / d)) if "train/loss" in r]
              for d in ("src", "full")}
    assert len(losses["full"]) == 2  # steps 3 and 4, continued from step 2's state
    assert losses["full"] == pytest.approx(losses["src"][2:], rel=1e-5)
    from helpers import experiment_config
    cont = experiment_config("continue")  # its model and tokenizer filled from src@2
    cont.init_from = f"{src}@2"
    cont.train.update(dict(num_steps=2, checkpoint_every=2, eval_every=2))
    pretrain.train(cont, str(tmp_path / "continued"), devices=jax.devices()[:1])
    assert _rows(str(tmp_path / "continued"))[0]["step"] == 0  # the source's own figure
    go.init_from = f"{tmp_path / 'nowhere'}@2"
    with pytest.raises(FileNotFoundError, match=r"nowhere@2'.*nowhere does not exist"):
        pretrain.train(go, str(tmp_path / "x"), devices=jax.devices()[:1])
