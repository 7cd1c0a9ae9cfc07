"""Distillation from a teacher's scores: MarginMSE and listwise KL, dense and ColBERT.

A scored row is a query, P passages (the first the positive, as the ranking loss reads
it) and a teacher score per passage. The student's scores are the logits the ranking
loss uses: scale x similarity (scale = 1 / contrastive.temperature, or the learned one;
similarity = cosine of unit vectors for the dense head, MaxSim for ColBERT), so a teacher
that is a model of this codebase (`encoder mine --scores` writes its own scale x
similarity) and its student speak in one unit.

  margin_mse  Hofstatter et al. 2020 ("Improving Efficient Neural Ranking Models with
              Cross-Architecture Knowledge Distillation"): the mean over (row, negative)
              of ((s_pos - s_neg) - (t_pos - t_neg))^2; sentence-transformers'
              MarginMSELoss with a list of negatives.
  kl          listwise: KL(softmax(t / T) || softmax(s / T)) over each row's passages,
              summed over passages, averaged over rows ("batchmean"), times T^2 (Hinton et
              al. 2015, so the gradients keep their size across T); sentence-transformers'
              DistillKLDivLoss.

Normalisation (contrastive.distill_normalize), per row over its real passages and applied
to the teacher's and the student's scores alike: `none`, or `minmax` ((x - min) /
(max - min), PyLate's normalize_scores; a row whose scores are all equal is left at 0).
With two passages minmax makes every row (1, 0): use it with lists of three or more.

Axes: B rows, P passages per row (1 positive + K negatives), D width, T tokens, K' token width.
"""
import jax
import jax.numpy as jnp

NEG_INF = -1e9


def dense_pair_scores(q, d):
    """[B, P] cosine of each query [B, D] with its own passages [B, P, D] (unit vectors)."""
    return jnp.einsum("bd,bpd->bp", q.astype(jnp.float32), d.astype(jnp.float32))


def colbert_pair_scores(q, d):
    """[B, P] MaxSim of each query (vectors [B, Tq, K'], mask [B, Tq]) with its own passages
    (vectors [B, P, Td, K'], mask [B, P, Td]); colbert.maxsim_scores row by row."""
    qv, qm = q
    dv, dm = d
    sims = jnp.einsum("bik,bpjk->bpij", qv.astype(jnp.float32), dv.astype(jnp.float32))
    sims = jnp.where(dm[:, :, None, :] > 0, sims, -jnp.inf)
    best = jnp.max(sims, axis=-1)                                        # [B, P, Tq]
    best = jnp.where(jnp.isfinite(best), best, 0.0)
    return jnp.sum(jnp.where(qm[:, None, :] > 0, best, 0.0), axis=-1)    # [B, P]


def minmax(x, mask):
    """Each row's real entries mapped to [0, 1] (padding kept at 0)."""
    real = mask > 0
    lo = jnp.min(jnp.where(real, x, jnp.inf), axis=-1, keepdims=True)
    hi = jnp.max(jnp.where(real, x, -jnp.inf), axis=-1, keepdims=True)
    span = hi - lo
    span = jnp.where(span > 0, span, 1.0)
    return jnp.where(real, (x - lo) / span, 0.0)


NORMALIZE = {"none": lambda x, mask: x, "minmax": minmax}


def margin_mse(student, teacher, mask, weight, temperature: float = 1.0):
    """MarginMSE over each row's (positive, negative_k) margins; student, teacher, mask
    [B, P] (column 0 the positive), weight [B] (0: a padded row). temperature: unused."""
    del temperature
    s = student.astype(jnp.float32)
    t = teacher.astype(jnp.float32)
    err = (s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])                  # [B, K]
    valid = (mask[:, 1:] > 0) & (weight[:, None] > 0) & (mask[:, :1] > 0)
    count = jnp.sum(valid)
    return jnp.sum(jnp.where(valid, err * err, 0.0)) / jnp.maximum(count, 1)


def kl_div(student, teacher, mask, weight, temperature: float = 1.0):
    """T^2 KL(softmax(teacher / T) || softmax(student / T)) per row over its real passages,
    averaged over real rows."""
    real = mask > 0
    t = jnp.where(real, teacher.astype(jnp.float32) / temperature, NEG_INF)
    s = jnp.where(real, student.astype(jnp.float32) / temperature, NEG_INF)
    log_pt = jax.nn.log_softmax(t, axis=-1)
    log_ps = jax.nn.log_softmax(s, axis=-1)
    per_row = jnp.sum(jnp.where(real, jnp.exp(log_pt) * (log_pt - log_ps), 0.0), axis=-1)
    w = (weight > 0).astype(jnp.float32)
    return temperature ** 2 * jnp.sum(per_row * w) / jnp.maximum(jnp.sum(w), 1.0)


LOSSES = {"margin_mse": margin_mse, "kl": kl_div}


def distill_loss(name: str, student, teacher, mask, weight, temperature: float = 1.0,
                 normalize: str = "none"):
    """The named loss on [B, P] scores after the named normalisation (module docstring)."""
    norm = NORMALIZE[normalize]
    return LOSSES[name](norm(student, mask), norm(teacher, mask), mask, weight, temperature)
