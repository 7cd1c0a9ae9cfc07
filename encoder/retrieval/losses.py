"""Contrastive losses for retrieval: in-batch negatives over the global batch, Matryoshka.

The loss reads whole [B, D] arrays. Under the trainer's jit the batch is sharded over
the mesh's data axes, so `q @ c.T` is every query against every device's passages:
XLA gathers the passages (the negatives of all devices), there is no hand-written
all-gather, and 1 device and 8 give the same number for the same global batch.

Axes: B batch (queries), K hard negatives per query, D embedding width, C candidates
(B positives, then B*K negatives).
"""
import jax
import jax.numpy as jnp

NEG_INF = -1e9
MAX_LOG_SCALE = 4.6052  # log(100): CLIP's clamp on a learned inverse temperature


def normalize(x):
    """L2-normalised rows (float32), zero rows kept zero."""
    x = x.astype(jnp.float32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def scale_of(log_scale, temperature: float):
    """The inverse temperature: exp(learned log scale) clamped at 100, or 1 / temperature."""
    if log_scale is None:
        return jnp.float32(1.0 / temperature)
    return jnp.exp(jnp.minimum(log_scale.astype(jnp.float32), MAX_LOG_SCALE))


def _ranking_loss(scores, valid, weight):
    """Weighted mean over rows of -log softmax(scores)[i, i] (candidate i is row i's positive)."""
    scores = jnp.where(valid, scores, NEG_INF)
    logp = jax.nn.log_softmax(scores, axis=-1)
    diag = jnp.diagonal(logp[:, :scores.shape[0]])  # [B]
    return -jnp.sum(diag * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def dot_scores(x, y):
    """[X, Y] dot products of unit vectors [X, D] and [Y, D] (float32): cosine similarity."""
    return jnp.einsum("xd,yd->xy", x.astype(jnp.float32), y.astype(jnp.float32))


def in_batch_loss(q, p, weight, scale, n=None, n_mask=None, q_ids=None, p_ids=None,
                  n_ids=None, symmetric: bool = False, score=dot_scores):
    """Multiple-negatives ranking (Henderson et al. 2017; Karpukhin et al. 2020, DPR).

    q [B, D], p [B, D]: unit query and positive vectors; n [B, K, D] hard negatives
    (n_mask [B, K] 1 for a real one); weight [B] (0: a padded row, neither query nor
    candidate). Each query's softmax runs over every positive and every negative of the
    global batch. Duplicates are masked: a candidate whose text is the query's own
    positive (another row with the same text_b, a mined negative equal to it), or the
    positive of another row with the same query text, is no negative (q_ids, p_ids,
    n_ids: [B], [B], [B, K] text ids; -1 never matches). symmetric adds the passage->query
    direction (each positive retrieves its query among all queries), averaged.
    score(x, y) -> [X, Y] similarities (dot_scores; colbert.maxsim_scores for late
    interaction, where q, p, n are (token vectors, token mask) pairs).
    """
    b = weight.shape[0]
    cand = p if n is None else jax.tree.map(
        lambda a, m: jnp.concatenate([a, m.reshape(-1, *m.shape[2:])], 0), p, n)  # [C, ...]
    scores = scale * score(q, cand)                                              # [B, C]
    real_row = weight > 0                                                        # [B]
    valid = jnp.broadcast_to(real_row[None, :], (b, b))                          # [B, B]
    eye = jnp.eye(b, dtype=bool)
    if p_ids is not None:
        dup = (p_ids[:, None] == p_ids[None, :]) & (p_ids[:, None] >= 0)
        if q_ids is not None:
            dup |= (q_ids[:, None] == q_ids[None, :]) & (q_ids[:, None] >= 0)
        valid &= ~(dup & ~eye)
    if n is not None:
        k = n_mask.shape[1]
        n_valid = (n_mask > 0) & real_row[:, None]                               # [B, K]
        n_valid = jnp.broadcast_to(n_valid.reshape(1, b * k), (b, b * k))
        if p_ids is not None and n_ids is not None:
            same = p_ids[:, None] == n_ids.reshape(1, b * k)                      # [B, B*K]
            n_valid &= ~(same & (p_ids[:, None] >= 0))
        valid = jnp.concatenate([valid, n_valid], 1)                             # [B, C]
    loss = _ranking_loss(scores, valid, weight)
    if symmetric:
        back = scale * score(p, q)                                               # [B, B]
        back_valid = jnp.broadcast_to(real_row[None, :], (b, b))
        if q_ids is not None:
            dup = (q_ids[:, None] == q_ids[None, :]) & (q_ids[:, None] >= 0)
            if p_ids is not None:
                dup |= (p_ids[:, None] == p_ids[None, :]) & (p_ids[:, None] >= 0)
            back_valid &= ~(dup & ~eye)
        loss = 0.5 * (loss + _ranking_loss(back, back_valid, weight))
    return loss


def matryoshka_loss(loss_at, q, p, n=None, dims=(), weights=None):
    """Matryoshka representation learning (Kusupati et al. 2022), as sentence-transformers'
    MatryoshkaLoss: the loss at each nested prefix of the raw (unnormalised) vectors, each
    prefix re-normalised, summed with weights (default 1 each). dims=() is the full width.

    loss_at(q, p, n) -> scalar on unit vectors; q [B, D], p [B, D], n [B, K, D] or None.
    Returns (total, {dim: loss at dim}).
    """
    dims = tuple(dims) or (q.shape[-1],)
    weights = tuple(weights) if weights else (1.0,) * len(dims)
    if len(weights) != len(dims):
        raise ValueError(f"{len(weights)} Matryoshka weights for {len(dims)} dims")
    parts = {}
    total = 0.0
    for d, w in zip(dims, weights):
        if not 0 < d <= q.shape[-1]:
            raise ValueError(f"Matryoshka dim {d} is not in [1, {q.shape[-1]}]")
        nd = None if n is None else normalize(n[..., :d])
        parts[d] = loss_at(normalize(q[..., :d]), normalize(p[..., :d]), nd)
        total = total + w * parts[d]
    return total, parts
