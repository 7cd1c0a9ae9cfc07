"""Runs in phases: the plan of a run whose training changes as it goes (ModernBERT, Ettin,
mmBERT, NeoBERT: a stable phase, a context extension, a decay).

A config declares `config.phases`, a tuple of plain dicts, each

    dict(name="extension", tokens=250e9,            # or steps=N: the phase's budget
         train=dict(learning_rate=3e-4, schedule="constant", warmup_steps=0, batch_size=576),
         data=dict(seq_len=8192), model=dict(rope_theta=160_000.0),
         masking=dict(rate=0.15))

A phase's data.sources is laid over the base's source by source (dict(web=dict(weight=
0.5)) changes web's weight; a new name adds a source) and its temperature replaces the
base's (encoder/data/mixture.py); each phase's mixture is checked, named by its phase.

Each phase's config is the base config with its dict laid over it (never the previous
phase's: each phase reads as stated). Only PHASE_FIELDS may change, the ones that leave
the parameters' shapes and the optimizer state's structure alone; a phase is otherwise
the same model and the same run. An empty `phases` is one phase, "main", of
train.num_steps steps: today's runs, unchanged.

`plan(config)` resolves the phases into steps:

  * a phase of `tokens` takes ceil(tokens / (batch_size * seq_len)) steps (counted
    after its batch-size warmup, whose tokens are counted exactly);
  * the learning rate of global step s in phase k is phase k's schedule
    (encoder/train/schedules.py, over the phase's steps) at s - start_k: the run's
    schedule is the phases' schedules joined, and the optimizer is built once with it
    (its state carries across phases);
  * batch-size warmup by tokens (a phase's train.batch_warmup_tokens > 0, ModernBERT's
    BatchSizeWarmupScheduler): the step's rows grow linearly with the tokens seen, from
    batch_warmup_start to batch_size, rounded down to batch_warmup_increment rows; the
    last warmup step takes exactly the tokens left. A step of r rows is r / m micro-batches
    of m = batch_size / grad_accum_steps rows accumulated, so nothing is recompiled per
    size beyond one step per distinct r;
  * data streams: consecutive phases reading the same data (PHASE_FIELDS["data"]) read
    one stream, which goes on where the previous phase stopped; a phase whose data
    differs (a new seq_len, other files, another mixture) starts its own stream, shuffled with
    seed + 1000 * stream, at its beginning. A stream reads whole steps' batches (the
    run's batches, as today) when its phases share one batch size and none warms up,
    else micro-batches of m rows, which a step concatenates. A resume restores the
    current stream's position from the checkpoint; a context extension started as a new
    run (init_state=full) from the short run's last step reads what the uninterrupted
    run reads.

A checkpoint's meta names its phase (`phase`, `phase_index`); every metrics.jsonl row
names `phase` and the run's `tokens` so far. A restart may append phases to a workdir's
run (a stable run given its decay) but not change the phases it declared.
"""
import dataclasses
import json
import math
import os
from typing import Any

import numpy as np
import optax

from encoder import ranges
# what a recipe states about its phases is plain data, in encoder/config.py (experiment
# files import nothing else); these names stay here for the code that plans them
from encoder.config import PHASE_FIELDS, phase_config, wsd_phases
from encoder.config import declared_phases as declared
from encoder.config import is_number as _number
from encoder.data import mixture
from encoder.train import schedules, workdir as workdir_lib

PHASE_KEYS = ("name", "steps", "tokens") + tuple(PHASE_FIELDS)
STREAM_SEED_STRIDE = 1000


@dataclasses.dataclass
class Phase:
    index: int
    name: str
    start: int                 # global step the phase starts at
    steps: int
    config: Any                # the base config with the phase laid over it
    stream: int                # index of the first phase of its data stream
    fetch: int                 # rows per read from the stream (a batch or a micro-batch)
    micro: int                 # micro-batch rows (batch_size / grad_accum_steps)
    warmup_rows: tuple = ()    # rows of the phase's first steps (batch-size warmup)
    tokens_before: int = 0     # tokens of the run before this phase

    @property
    def end(self) -> int:
        return self.start + self.steps

    def rows(self, step: int) -> int:
        """Rows of global step `step` (0-based) of this phase."""
        i = step - self.start
        return self.warmup_rows[i] if i < len(self.warmup_rows) else \
            int(self.config.train.batch_size)

    def tokens_after(self, step_no: int) -> int:
        """Tokens of the run after its first step_no steps (step_no inside this phase)."""
        seq = int(self.config.data.seq_len)
        done = step_no - self.start
        warm = self.warmup_rows[:done]
        return self.tokens_before + seq * (sum(warm) + max(0, done - len(warm)) *
                                           int(self.config.train.batch_size))


@dataclasses.dataclass
class Plan:
    phases: list
    schedule: optax.Schedule
    peak_learning_rate: float

    @property
    def total_steps(self) -> int:
        return self.phases[-1].end

    def index_at(self, step: int) -> int:
        """The phase global step `step` (0-based, the next one to run) belongs to; the
        total (a finished run) belongs to the last."""
        for p in self.phases:
            if step < p.end:
                return p.index
        return self.phases[-1].index

    def phase_at(self, step: int) -> Phase:
        return self.phases[self.index_at(step)]

    def tokens_after(self, step_no: int) -> int:
        return self.phase_at(max(step_no - 1, 0)).tokens_after(step_no) if step_no else 0

    def describe(self) -> list[str]:
        out = []
        for p in self.phases:
            c = p.config
            tokens = p.tokens_after(p.end) - p.tokens_before
            out.append(f"phase {p.index} {p.name!r}: steps {p.start}..{p.end} ({p.steps:,} "
                       f"steps, {tokens:,} tokens), seq_len {c.data.seq_len}, batch "
                       f"{c.train.batch_size}" + (f" (warmup from {p.warmup_rows[0]})"
                                                  if p.warmup_rows else "")
                       + f", lr {c.train.schedule} {c.train.learning_rate:g}, masking "
                       f"{c.masking.rate:g}, rope_theta {c.model.rope_theta:g}")
        return out


def _check_phase(i: int, p: dict) -> None:
    where = f"phases[{i}] ({p.get('name', '?')!r})"
    unknown = sorted(set(p) - set(PHASE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; a phase has {', '.join(PHASE_KEYS)}")
    if not p.get("name"):
        raise ValueError(f"{where}: every phase needs a name")
    for key in ("steps", "tokens"):
        v = p.get(key, 0)
        if not _number(v) or (key == "steps" and v != int(v)):
            raise ValueError(f"{where}: {key}={v!r} must be a "
                             f"{'whole number' if key == 'steps' else 'number'}")
    if bool(p.get("steps", 0)) == bool(p.get("tokens", 0)):
        raise ValueError(f"{where}: give exactly one budget, steps=N or tokens=N (got "
                         f"steps={p.get('steps', 0)}, tokens={p.get('tokens', 0)})")
    for section, fields in PHASE_FIELDS.items():
        if not isinstance(p.get(section, {}) or {}, dict):
            raise ValueError(f"{where}: {section} must be a dict of fields, got "
                             f"{p[section]!r}")
        bad = sorted(set(p.get(section, {}) or {}) - set(fields))
        if bad:
            raise ValueError(f"{where}: {section}.{bad[0]} cannot change in a phase (it changes "
                             f"the model or the optimizer's state); a phase may set "
                             f"{section}.{{{', '.join(fields)}}}")


def warmup_rows(train_cfg, seq_len: int, micro: int, budget_steps: int | None = None) -> tuple:
    """Rows per step during batch-size warmup (see the module docstring)."""
    total = int(train_cfg.get("batch_warmup_tokens", 0))
    if total <= 0:
        return ()
    b = int(train_cfg.batch_size)
    start = int(train_cfg.get("batch_warmup_start", 0)) or micro
    inc = int(train_cfg.get("batch_warmup_increment", 0)) or micro
    for name, v in (("batch_warmup_start", start), ("batch_warmup_increment", inc)):
        if v % micro or v <= 0:
            raise ValueError(f"train.{name}={v} must be a positive multiple of the micro-batch "
                             f"({micro} rows = batch_size / grad_accum_steps)")
    if start > b:
        raise ValueError(f"train.batch_warmup_start={start} exceeds train.batch_size={b}")
    rows, seen = [], 0
    while seen < total and (budget_steps is None or len(rows) < budget_steps):
        r = start + (b - start) * seen / total
        r = min(b, max(start, int(r // inc) * inc))
        left = math.ceil((total - seen) / seq_len)        # rows the budget still holds
        r = min(r, math.ceil(left / micro) * micro)
        rows.append(r)
        seen += r * seq_len
    return tuple(rows)


def _data_key(c) -> tuple:
    return tuple(json.dumps(mixture.plain(c.data.get(k)), sort_keys=True, default=str)
                 for k in PHASE_FIELDS["data"])


def plan(config) -> Plan:
    """Resolves config.phases (or the one implicit phase) into steps, schedules, streams."""
    dicts = declared(config) or [{"name": "main", "steps": int(config.train.num_steps)}]
    for i, p in enumerate(dicts):
        _check_phase(i, p)
    names = [p["name"] for p in dicts]
    if len(set(names)) != len(names):
        raise ValueError(f"phase names must be distinct, got {names}")
    configs = [phase_config(config, p) for p in dicts]
    for p, c in zip(dicts, configs):  # a mixture's sources and weights, named by phase
        mixture.parse(c.data, f"phase {p['name']!r}" if declared(config) else "")
    for p, c in (zip(dicts, configs) if declared(config) else ()):  # each phase as it runs
        ranges.check(c, f"phase {p['name']!r}", whole_run=False)
    phases, start, tokens = [], 0, 0
    for i, (p, c) in enumerate(zip(dicts, configs)):
        t = c.train
        if t.batch_size % t.grad_accum_steps:
            raise ValueError(f"phases[{i}] ({p['name']!r}): batch_size {t.batch_size} is not "
                             f"divisible by grad_accum_steps {t.grad_accum_steps}")
        micro, seq = t.batch_size // t.grad_accum_steps, int(c.data.seq_len)
        steps = int(p.get("steps", 0)) or None
        warm = warmup_rows(t, seq, micro, steps)
        if steps is None:
            left = max(0, int(p["tokens"]) - seq * sum(warm))
            steps = len(warm) + math.ceil(left / (t.batch_size * seq))
        phase = Phase(i, p["name"], start, steps, c, i, int(t.batch_size), micro, warm, tokens)
        phases.append(phase)
        tokens = phase.tokens_after(phase.end)
        start += steps
    # Streams: runs of consecutive phases reading the same data.
    groups: list[list[Phase]] = []
    for ph in phases:
        if groups and _data_key(groups[-1][0].config) == _data_key(ph.config):
            groups[-1].append(ph)
        else:
            groups.append([ph])
    for g in groups:
        whole = len({ph.config.train.batch_size for ph in g}) == 1 and not any(
            ph.warmup_rows for ph in g)
        micros = {ph.micro for ph in g}
        if not whole and len(micros) > 1:
            raise ValueError(f"phases {[ph.name for ph in g]} read one data stream with "
                             f"different batch sizes, so they must share the micro-batch "
                             f"(batch_size / grad_accum_steps), got {sorted(micros)}")
        for ph in g:
            ph.stream = g[0].index
            ph.fetch = ph.config.train.batch_size if whole else ph.micro
    for ph in phases:
        if ph.steps <= 0:
            raise ValueError(f"phase {ph.name!r} has no steps")
    scheds = [schedules.make(ph.config.train, ph.steps) for ph in phases]
    schedule = scheds[0] if len(scheds) == 1 else optax.join_schedules(
        scheds, [ph.start for ph in phases[1:]])
    peak = float(config.train.learning_rate)
    return Plan(phases, schedule, peak)


def validate(config) -> Plan:
    """Every phase's checks before anything is built: names, budgets, fields, schedules."""
    p = plan(config)
    for ph in p.phases:
        schedules.validate(ph.config.train)
    return p


def stream_seed(seed: int, phase: Phase) -> int:
    """Stream 0 keeps the run's seed (an unphased run reads what it always read)."""
    return seed + STREAM_SEED_STRIDE * phase.stream


def resumes_stream(phase: Phase, step: int, plan_: Plan) -> bool:
    """Whether a saved data position at global `step` belongs to this phase's stream (its
    stream had begun), or the stream starts fresh there."""
    return step > plan_.phases[phase.stream].start


def end_of(phase: Phase, rows, plan_: Plan, seed: int) -> int:
    """The step a phase ends at: its planned end, or earlier where a mixture with
    data.on_exhausted='end' runs a source dry (the step before the batch that would need
    a row past its last)."""
    from encoder.data import mixture
    from encoder.train.loop import report
    if not isinstance(rows, mixture.Mixture) or rows.on_exhausted != "end":
        return phase.end
    first = plan_.phases[phase.stream]
    stream = [p for p in plan_.phases if p.stream == phase.stream]
    if any(p.fetch != p.config.train.batch_size for p in stream):
        raise ValueError(f"phase {phase.name!r}: data.on_exhausted='end' reads whole batches; "
                         "it does not combine with a batch-size warmup (use 'repeat')")
    n = mixture.batches_until_exhausted(stream_seed(seed, phase), rows.probs,
                                        rows.sizes, phase.fetch, phase.end - first.start)
    if n is None or first.start + n >= phase.end:
        return phase.end
    end = max(first.start + n, phase.start)
    report(f"phase {phase.name!r}: a source runs dry at step {end} (data.on_exhausted='end'): "
           f"the phase ends there, {phase.end - end:,} steps early")
    return end


class Batches:
    """The iterator run_loop reads for one phase: each step's rows from its stream (a batch,
    or rows / fetch micro-batches concatenated); get_state is the stream's position."""

    def __init__(self, stream, phase: Phase, step: int):
        self.stream, self.phase, self.step = stream, phase, step

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        rows = self.phase.rows(self.step)
        self.step += 1
        if rows == self.phase.fetch:
            return next(self.stream)
        parts = [next(self.stream) for _ in range(rows // self.phase.fetch)]
        return {k: np.concatenate([b[k] for b in parts]) for k in parts[0]}

    def get_state(self):
        return self.stream.get_state()

    def metrics(self) -> dict:
        """A mixture's realised figures so far (data/<source>/tokens, .../epochs)."""
        from encoder.data import mixture
        return mixture.metrics_of(self.stream)


class PhaseWriter:
    """metrics.jsonl rows with the phase's name and the run's tokens so far."""

    def __init__(self, writer, phase: Phase, plan_: Plan):
        self.writer, self.phase, self.plan = writer, phase, plan_
        self.workdir = writer.workdir

    def write(self, step: int, row: dict) -> None:
        self.writer.write(step, {**row, "phase": self.phase.name,
                                 "tokens": self.plan.tokens_after(step)})


def check_appended(workdir: str, config) -> None:
    """A restart may append phases to a run with checkpoints, never change declared ones."""
    path = os.path.join(workdir, "run.json")
    if not os.path.exists(path) or not os.path.isdir(os.path.join(workdir, "checkpoints")):
        return
    with open(path) as f:
        old = json.load(f).get("config", {}).get("phases", [])
    if isinstance(old, str):  # written by a version that stringified it
        return
    new = json.loads(json.dumps(declared(config), default=str))
    old = json.loads(json.dumps(list(old or []), default=str))
    if (not old and new) or old != new[:len(old)]:
        changed = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b),
                       min(len(old), len(new)))
        raise workdir_lib.RunMismatch(
            f"{workdir} holds a run whose phases differ from this config's at phase {changed} "
            f"({old[changed] if changed < len(old) else '<none>'} -> "
            f"{new[changed] if changed < len(new) else '<none>'}); a restart may only append "
            "phases. Use a new --workdir, or start one from this run (init_from with "
            "init_step and init_state=full).")
