"""Mixtures of named sources: the spec, its weights, and which rows every step reads.

A run reads one source (data.train_files, as always) or a mixture (data.sources):

    data.sources = dict(web=dict(files="fineweb/*.parquet", weight=0.7),
                        code=dict(files="stack/", format="jsonl", text_field="content",
                                  weight=0.3))
    data.temperature = 0.0        # 0: the weights as given; tau > 0: see `probabilities`
    data.on_exhausted = "repeat"  # a source that runs dry: repeat (a new epoch) | end

Each source is prepared on its own (encoder/data/pipeline.py), so a packed row never
holds two sources' text.

Weights (`probabilities`). With temperature 0 a source is drawn with probability
w_i / sum_j w_j. With temperature tau > 0, p_i is proportional to w_i * n_i**tau, n_i the
source's tokens: XLM-R's q_i ~ p_i**alpha (Conneau et al. 2020 §3.1, alpha = 0.3) with
the weights as multipliers (1 each: pure temperature sampling). tau = 1 samples each
source in proportion to its size; a smaller tau flattens the mixture towards uniform, so
small sources are upsampled: mmBERT (Marone et al. 2025) lowers tau 0.7 -> 0.5 -> 0.3 by
phase to give its low-resource languages a growing share. (tau -> 0 tends to uniform;
tau = 0 exactly means "the weights as given".)

Order. Row i of a stream (counting every process's rows of every global batch) comes from
source s(i): the first s with u(i) < P_s, P the cumulative probabilities and u(i) the
i-th output of splitmix64 seeded from the run's seed (a counter-based hash, Steele et al.
2014), so the source of any row is a pure function of (seed, i). The k-th row drawn from
source s is row pi_{s,e}(k mod n_s) of its packed rows, e = k div n_s its epoch and pi a
Feistel permutation keyed by (seed, the source's name, e) (Black & Rogaway 2002, cycle
walking): every epoch has its own order, computed per index in O(1) memory whatever the
source's size. The iterator's state is the next row index and the rows drawn from each
source, a few numbers that go into the checkpoint; restored, it reads exactly the rows an
uninterrupted run reads. Each process computes the whole global batch's sources and reads
only its own block of it (as the single-source pipeline), so a step's global batch does
not depend on the process count. The same seed draws the same u(i) whatever the weights:
two runs of a weight ablation differ only where their cumulative weights differ.
"""
import dataclasses
import functools
import hashlib
import json
import math
import re

import numpy as np

from encoder.data import formats

ON_EXHAUSTED = ("repeat", "end")
SOURCE_KEYS = ("files", "format", "text_field", "weight")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a config attribute and a metric key
MAX_TEMPERATURE = 1.0  # beyond 1 large sources would be upsampled past their size


class SourceExhausted(StopIteration):
    """A source ran dry with on_exhausted='end': the phase reading it ends here."""


# ---------------------------------------------------------------- the spec

@dataclasses.dataclass(frozen=True)
class Source:
    """One named source of a mixture (format / text_field "": the data section's)."""
    name: str
    files: str = ""            # "": the embedded corpus, as data.train_files=""
    format: str = ""
    text_field: str = ""
    weight: float = 1.0


@dataclasses.dataclass(frozen=True)
class Spec:
    """A validated mixture: its sources, temperature and what a dry source does."""
    sources: tuple
    temperature: float = 0.0
    on_exhausted: str = "repeat"

    @property
    def names(self) -> tuple:
        return tuple(s.name for s in self.sources)

    @property
    def weights(self) -> np.ndarray:
        return np.array([s.weight for s in self.sources], np.float64)

    def key(self) -> str:
        """What the mixture reads, as a short hash (the data-order record's key)."""
        return _digest([dataclasses.asdict(s) for s in self.sources], self.temperature,
                       self.on_exhausted)


def plain(value):
    """A ConfigDict (or a dict holding them) as plain dicts."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _where(where: str, field: str) -> str:
    return f"{where}: {field}" if where else field


def parse(data, where: str = "") -> Spec | None:
    """data.sources / temperature / on_exhausted, checked (None: no mixture, the run reads
    data.train_files). Every refusal is one line naming the field, the source and `where`
    (the phase)."""
    sources = plain(data.get("sources")) or {}
    temperature = data.get("temperature", 0.0)
    on_exhausted = data.get("on_exhausted", "repeat")
    if not isinstance(sources, dict):
        raise ValueError(_where(where, f"data.sources must map a source's name to "
                                       f"dict(files=..., weight=...), got {sources!r}"))
    if not _number(temperature) or not 0.0 <= temperature <= MAX_TEMPERATURE:
        raise ValueError(_where(where, f"data.temperature={temperature!r}: expected a number "
                                       f"in [0, {MAX_TEMPERATURE:g}] (0: the weights as "
                                       "given; tau: weights proportional to tokens**tau)"))
    if on_exhausted not in ON_EXHAUSTED:
        raise ValueError(_where(where, f"data.on_exhausted={on_exhausted!r}: expected one of "
                                       f"{', '.join(ON_EXHAUSTED)}"))
    if not sources:
        if temperature:
            raise ValueError(_where(where, f"data.temperature={temperature:g} weighs the "
                                           "sources of a mixture, and data.sources is empty"))
        return None
    if data.get("train_files"):
        raise ValueError(_where(where, f"give data.train_files or data.sources, not both "
                                       f"(train_files={data.get('train_files')!r}, sources "
                                       f"{', '.join(sources)}): set each source's files "
                                       "(data.sources.NAME.files), or its weight to 0"))
    out = [_source(name, s, where) for name, s in sources.items()]
    if not any(s.weight > 0 for s in out):
        raise ValueError(_where(where, f"data.sources: every weight is 0 "
                                       f"({', '.join(sources)}); give one a weight > 0"))
    return Spec(tuple(out), float(temperature), on_exhausted)


def _source(name, s, where: str) -> Source:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(_where(where, f"data.sources: {name!r} is not a source name (letters, "
                                       "digits and _, not starting with a digit: it names a "
                                       "config field and a metric)"))
    field = f"data.sources.{name}"
    if not isinstance(s, dict):
        raise ValueError(_where(where, f"{field} must be dict(files=..., weight=...), got "
                                       f"{s!r}"))
    unknown = sorted(set(s) - set(SOURCE_KEYS))
    if unknown:
        raise ValueError(_where(where, f"{field}.{unknown[0]}: unknown; a source has "
                                       f"{', '.join(SOURCE_KEYS)}"))
    weight = s.get("weight", 1.0)
    if not _number(weight) or weight < 0:
        raise ValueError(_where(where, f"{field}.weight={weight!r}: expected a number >= 0"))
    for key in ("files", "format", "text_field"):
        if not isinstance(s.get(key, ""), str):
            raise ValueError(_where(where, f"{field}.{key}={s[key]!r}: expected a string"))
    if s.get("format") and s["format"] not in formats.FORMAT_NAMES:
        raise ValueError(_where(where, f"{field}.format={s['format']!r}: expected one of "
                                       f"{', '.join(formats.FORMAT_NAMES)} (empty: each "
                                       "file's own)"))
    return Source(name, s.get("files", ""), s.get("format", ""), s.get("text_field", ""),
                  float(weight))


def probabilities(weights, tokens, temperature: float) -> np.ndarray:
    """Each source's share of the rows drawn (see the module docstring):
    temperature 0: w_i / sum w; tau > 0: w_i n_i**tau / sum_j w_j n_j**tau."""
    w = np.asarray(weights, np.float64)
    if temperature > 0:
        n = np.asarray(tokens, np.float64)
        w = w * np.where(n > 0, n, 0.0) ** temperature
    total = w.sum()
    if not total > 0:
        raise ValueError("no source can be drawn (every weight, or every weighted source's "
                         "size, is 0)")
    return w / total


# ---------------------------------------------------------------- counter-based sampling

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_U30, _U27, _U31 = np.uint64(30), np.uint64(27), np.uint64(31)
FEISTEL_ROUNDS = 6
CHUNK = 1 << 20  # rows hashed at once when replaying a stream's draws


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's output function on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> _U30)) * _M1
    x = (x ^ (x >> _U27)) * _M2
    return x ^ (x >> _U31)


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)  # a batch asks for the same few keys again
def stream_key(*parts) -> int:
    """A 64-bit key from any JSON-able parts (seed, purpose, source name, epoch)."""
    return int(_digest(*parts), 16)


def uniforms(key: int, counters) -> np.ndarray:
    """The counters-th outputs of splitmix64 seeded with key, as floats in [0, 1)."""
    c = np.atleast_1d(np.asarray(counters, np.uint64))
    x = _mix(np.uint64(key) + c * _GOLDEN)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def permute(key: int, index, n: int) -> np.ndarray:
    """pi(index) for a key-chosen permutation pi of [0, n): a balanced Feistel network on
    the smallest even bit width covering n, cycle-walked back into [0, n)."""
    x = np.atleast_1d(np.asarray(index, np.uint64))
    if n <= 1:
        return np.zeros(x.shape, np.int64)
    bits = max(2, (n - 1).bit_length())
    bits += bits % 2
    half = np.uint64(bits // 2)
    mask = np.uint64((1 << (bits // 2)) - 1)
    rounds = [np.uint64(stream_key(key, r)) for r in range(FEISTEL_ROUNDS)]

    def once(v):
        left, right = v >> half, v & mask
        for k in rounds:
            left, right = right, left ^ (_mix(right + k) & mask)
        return (left << half) | right

    out = once(x)
    outside = out >= np.uint64(n)
    while outside.any():  # each pass maps a value back into [0, n) with p >= 1/4
        out[outside] = once(out[outside])
        outside = out >= np.uint64(n)
    return out.astype(np.int64)


def cumulative(probs) -> np.ndarray:
    """The inverse-CDF table: P_s, exactly 1 from the last drawable source on."""
    p = np.asarray(probs, np.float64)
    cdf = np.cumsum(p)
    cdf[int(np.flatnonzero(p > 0)[-1]):] = 1.0
    return cdf


def sources_of(seed: int, cdf: np.ndarray, start: int, size: int) -> np.ndarray:
    """The source of stream rows start .. start+size-1 (a pure function of seed and row)."""
    u = uniforms(stream_key(seed, "source"), np.arange(start, start + size, dtype=np.uint64))
    return np.searchsorted(cdf, u, side="right").astype(np.int64)


def draws(src: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """k for each row: its source's draw index (counts before these rows, then in order)."""
    k = np.empty(len(src), np.int64)
    for s in range(len(counts)):
        at = src == s
        k[at] = counts[s] + np.arange(int(at.sum()))
    return k


def locate(seed: int, name: str, k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(epoch, row) of a source's draws k: row pi_{seed,name,epoch}(k mod n) of its n rows."""
    k = np.asarray(k, np.int64)
    epoch, at = k // n, k % n
    rows = np.empty(len(k), np.int64)
    for e in np.unique(epoch):
        sel = epoch == e
        rows[sel] = permute(stream_key(seed, "order", name, int(e)), at[sel], n)
    return epoch, rows


def counts_at(seed: int, probs, row: int, chunk: int = CHUNK) -> np.ndarray:
    """Rows drawn from each source before stream row `row` (a replay, chunk rows at once)."""
    cdf = cumulative(probs)
    counts = np.zeros(len(cdf), np.int64)
    for start in range(0, row, chunk):
        counts += np.bincount(sources_of(seed, cdf, start, min(chunk, row - start)),
                              minlength=len(cdf))
    return counts


def batches_until_exhausted(seed: int, probs, sizes, batch_size: int,
                            limit: int) -> int | None:
    """How many whole batches a stream reads before a batch would need a row past some
    source's last (on_exhausted='end'); None if none does within `limit` batches."""
    cdf, sizes = cumulative(probs), np.asarray(sizes, np.int64)
    counts = np.zeros(len(cdf), np.int64)
    per = max(1, CHUNK // batch_size)
    for b0 in range(0, limit, per):
        nb = min(per, limit - b0)
        src = sources_of(seed, cdf, b0 * batch_size, nb * batch_size).reshape(nb, batch_size)
        running = counts + np.cumsum(np.stack([np.bincount(r, minlength=len(cdf))
                                               for r in src]), axis=0)
        over = np.flatnonzero((running > sizes).any(axis=1))
        if len(over):
            return b0 + int(over[0])
        counts = running[-1]
    return None


# ---------------------------------------------------------------- the rows a run reads

@dataclasses.dataclass
class Mixture:
    """A mixture's row sources (one random-access source of packed rows per named source,
    grain-style `read_batch`), their probabilities and what a dry source does."""
    names: tuple
    rows: tuple                 # per source: len() and read_batch(indices) -> dict of [B, T]
    probs: np.ndarray
    on_exhausted: str = "repeat"
    seq_len: int = 0
    tokens: tuple = ()          # per source: its tokens (what the temperature weighed)

    def __post_init__(self):
        self.probs = np.asarray(self.probs, np.float64)
        self.sizes = np.array([len(r) if r is not None else 0 for r in self.rows], np.int64)
        empty = [n for n, p, z in zip(self.names, self.probs, self.sizes) if p > 0 and not z]
        if empty:
            raise ValueError(f"data.sources.{empty[0]}: no training row to draw (its weight "
                             "is > 0)")

    def __len__(self) -> int:
        """Rows of the sources that are drawn (what one pass over the mixture reads)."""
        return int(self.sizes[self.probs > 0].sum())

    def identity(self) -> str:
        """Names, probabilities and sizes: a saved position is only this mixture's."""
        return _digest(list(self.names), [float(p) for p in self.probs],
                       [int(n) for n in self.sizes], self.on_exhausted)

    def shares(self) -> dict:
        return {n: float(p) for n, p in zip(self.names, self.probs)}

    def iterator(self, batch_size: int, seed: int, process_index: int = 0,
                 process_count: int = 1) -> "MixtureIterator":
        return MixtureIterator(self, batch_size, seed, process_index, process_count)

    def read(self, seed: int, src: np.ndarray, k: np.ndarray) -> dict:
        """The rows of draws (src, k), in order: each source's rows in one read_batch."""
        out: dict = {}
        for s in np.unique(src):
            at = np.flatnonzero(src == s)
            _, rows = locate(seed, self.names[s], k[at], int(self.sizes[s]))
            part = self.rows[s].read_batch(rows)
            for key, v in part.items():
                if key not in out:
                    out[key] = np.empty((len(src),) + v.shape[1:], v.dtype)
                out[key][at] = v
        return out


class MixtureIterator:
    """This process's batches of a mixture (the single-source iterator's interface:
    __next__, get_state, set_state), plus the realised mixture so far."""

    def __init__(self, mixture: Mixture, batch_size: int, seed: int, process_index: int = 0,
                 process_count: int = 1):
        if batch_size % process_count:
            raise ValueError(f"global batch {batch_size} is not divisible by {process_count} "
                             "processes")
        self.mixture, self.batch_size, self.seed = mixture, int(batch_size), int(seed)
        self.local = self.batch_size // process_count
        self.lo = process_index * self.local
        self.cdf = cumulative(mixture.probs)
        self.row = 0
        self.counts = np.zeros(len(mixture.names), np.int64)
        self.carried: dict = {}   # figures of the run's earlier streams (carry)

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        m = self.mixture
        src = sources_of(self.seed, self.cdf, self.row, self.batch_size)
        after = self.counts + np.bincount(src, minlength=len(m.names))
        if m.on_exhausted == "end":
            dry = np.flatnonzero(after > m.sizes)
            if len(dry):
                s = int(dry[0])
                raise SourceExhausted(
                    f"data.sources.{m.names[s]} ran dry after {int(m.sizes[s]):,} rows (row "
                    f"{self.row:,} of the stream; data.on_exhausted='end'): the phase ends")
        k = draws(src, self.counts)
        mine = slice(self.lo, self.lo + self.local)
        batch = m.read(self.seed, src[mine], k[mine])
        self.row += self.batch_size
        self.counts = after
        return batch

    # -- the checkpoint's data position
    def get_state(self) -> dict:
        return {"mixture": self.mixture.identity(), "row": int(self.row),
                "drawn": {n: int(c) for n, c in zip(self.mixture.names, self.counts)},
                "realised": self.realised(),
                **({"carried": self.carried} if self.carried else {})}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or "drawn" not in state:
            raise ValueError("the checkpoint's data position is a single source's, and this "
                             "run reads a mixture (data.sources): the data changed since it "
                             "was saved; use a new workdir")
        if state.get("mixture") != self.mixture.identity():
            m = self.mixture
            now = ", ".join(f"{n} {p:.3g} of {z:,} rows" for n, p, z in
                            zip(m.names, m.probs, m.sizes.tolist()))
            raise ValueError(f"the checkpoint's data position belongs to another mixture "
                             f"(sources {', '.join(state['drawn'])}); this run draws {now}: "
                             "a source's files or weight changed since; use a new workdir")
        self.row = int(state["row"])
        self.counts = np.array([int(state["drawn"][n]) for n in self.mixture.names], np.int64)
        self.carried = dict(state.get("carried") or {})

    # -- the realised mixture
    def carry(self, previous) -> None:
        """Counts the figures of the run's previous stream (an iterator, or its saved
        state) into this one's, so `realised` covers the whole run across phases."""
        if isinstance(previous, MixtureIterator):
            before = previous.realised()
        elif isinstance(previous, dict) and "drawn" in previous:
            before = previous.get("realised") or {}
        else:
            return
        self.carried = {n: dict(v) for n, v in before.items()}

    def realised(self) -> dict:
        """{source: {"rows", "tokens", "epochs"}}: rows drawn (every process's), their tokens
        (rows x seq_len, as the run counts its tokens) and passes over the source, this
        stream's plus any carried from earlier ones."""
        m, out = self.mixture, {n: dict(v) for n, v in self.carried.items()}
        for n, c, size in zip(m.names, self.counts, m.sizes):
            mine = {"rows": int(c), "tokens": int(c) * int(m.seq_len),
                    "epochs": float(c) / float(size) if size else 0.0}
            old = out.get(n, {})
            out[n] = {k: old.get(k, 0) + v for k, v in mine.items()}
        return out

    def metrics(self) -> dict:
        """The realised mixture as metrics-row entries: data/<name>/tokens, .../epochs."""
        return {f"data/{n}/{k}": v for n, fig in self.realised().items()
                for k, v in fig.items() if k != "rows"}


def metrics_of(iterator) -> dict:
    """data/<name>/tokens and /epochs of a run's batches (a MixtureIterator, or what wraps
    one as `.stream`); {} for a single-source run."""
    it = getattr(iterator, "stream", iterator)
    return it.metrics() if isinstance(it, MixtureIterator) else {}


# ---------------------------------------------------------------- held-out rows

HELD_OUT_SLOTS = 1024  # rows per block of the held-out interleave (at least one a source)


class Interleaved:
    """The held-out rows of a mixture, in a fixed order (the held-out evaluator reads the
    first batches in order): blocks of HELD_OUT_SLOTS rows, each holding every source by
    its probability (largest remainders), spread evenly (smooth weighted round-robin); a
    source's rows wrap around when it has fewer than its share. A random-access row
    source (len, read_batch), O(1) per row."""

    def __init__(self, names, rows, probs):
        keep = [i for i, (r, p) in enumerate(zip(rows, probs)) if r is not None and len(r)
                and p > 0]
        if not keep:
            raise ValueError("no source of the mixture has a held-out row")
        self.names = tuple(names[i] for i in keep)
        self.rows = tuple(rows[i] for i in keep)
        p = np.asarray([probs[i] for i in keep], np.float64)
        p = p / p.sum()
        self.sizes = np.array([len(r) for r in self.rows], np.int64)
        self.n = int(self.sizes.sum())
        self.slots = max(HELD_OUT_SLOTS, len(p))
        self.quota = _apportion(p, self.slots)
        self.pattern, self.rank = _round_robin(self.quota)

    def __len__(self) -> int:
        return self.n

    def locate(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """(source, its row) of each held-out row."""
        i = np.asarray(indices, np.int64)
        block, slot = i // self.slots, i % self.slots
        src = self.pattern[slot]
        j = block * self.quota[src] + self.rank[slot]
        return src, j % self.sizes[src]

    def read_batch(self, indices) -> dict:
        src, rows = self.locate(indices)
        out: dict = {}
        for s in np.unique(src):
            at = np.flatnonzero(src == s)
            for key, v in self.rows[s].read_batch(rows[at]).items():
                if key not in out:
                    out[key] = np.empty((len(src),) + v.shape[1:], v.dtype)
                out[key][at] = v
        return out

    def __getitem__(self, i: int) -> dict:
        return {k: v[0] for k, v in self.read_batch([i]).items()}


def _apportion(p: np.ndarray, slots: int) -> np.ndarray:
    """Whole slots per share, summing to `slots` (largest remainders, each at least 1)."""
    raw = p * slots
    quota = np.maximum(1, np.floor(raw).astype(np.int64))
    while quota.sum() > slots:
        quota[np.argmax(quota)] -= 1
    order = np.argsort(-(raw - np.floor(raw)), kind="stable")
    for s in order[:slots - int(quota.sum())]:
        quota[s] += 1
    return quota


def _round_robin(quota: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A block's slots: the source of each (smooth weighted round-robin) and its rank
    among that source's slots."""
    total = int(quota.sum())
    credit = np.zeros(len(quota), np.int64)
    taken = np.zeros(len(quota), np.int64)
    pattern, rank = np.empty(total, np.int64), np.empty(total, np.int64)
    for t in range(total):
        credit += quota
        s = int(np.argmax(credit))
        credit[s] -= total
        pattern[t], rank[t] = s, taken[s]
        taken[s] += 1
    return pattern, rank
