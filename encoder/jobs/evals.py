"""Evaluators declared in the experiment config, run by the training loop at their own
cadence (big_vision's `config.evals`: a name, a kind, a cadence, the kind's options):

    config.evals.sts = evals.entry("embedding", task="sts_relatedness")  # each checkpoint
    config.evals.topic = evals.entry("probe", task="topic", every=800, max_train=500)
    config.evals.heldout_long = evals.entry("heldout", batches=32, every=1000)
    # or :evals=sts_relatedness+topic after experiments/pretrain.py (from_tasks)

(`entry` fills every option's default, so each can be overridden by a flag.)
`every` is in steps (default: train.checkpoint_every, so each saved checkpoint gets a
score) and the run's last step always gets one. Scores reach metrics.jsonl as
`evals/NAME/METRIC` and are appended to WORKDIR/evals.jsonl with the step, the kind and
the options (encoder/train/metrics_io.py ScoreRecord); a resumed run that replays a
step already scored reads its score back
instead of computing it again (the replayed parameters are bitwise the ones scored), and
a changed option is a new evaluator, scored afresh.

The frozen kinds read a task folder of the suite's layout (`tasks=DIR`; default: the
embedded suite, built once into WORKDIR/evals/tasks). Fine-tunings and whole suites on
each checkpoint are the watcher's (`encoder suite --watch=WORKDIR`), not the loop's.
"""
import dataclasses
import hashlib
import json
import os
from typing import Callable

from encoder.errors import UsageError

TASKS = os.path.join("evals", "tasks")  # the embedded suite, under the workdir


@dataclasses.dataclass(frozen=True)
class Kind:
    options: dict            # option -> default (a required option: None)
    build: Callable          # build(context, options) -> fn(params, step) -> metrics
    task_kinds: tuple = ()   # the suite task kinds it reads (empty: no task)
    doc: str = ""


@dataclasses.dataclass
class Context:
    """What the kinds build from: the run's model, tokenizer, workdir and held-out set."""
    model_cfg: object
    tokenizer: object
    workdir: str
    seq_len: int
    held_out: Callable | None   # held_out(num_batches) -> evaluator; None: no held-out set

    def tasks_dir(self, options: dict) -> str:
        return options["tasks"] or os.path.join(self.workdir, TASKS)


@dataclasses.dataclass(frozen=True)
class Declared:
    name: str
    kind: str
    every: int
    options: dict
    fn: Callable
    data: str = ""  # the hash of its task's files (task_data)

    @property
    def key(self) -> str:
        """What identifies its scores in the record: a changed option or task file is a new
        evaluator."""
        return key(self.kind, self.options, self.data)


def key(kind: str, options: dict, data: str = "") -> str:
    """An evaluator's protocol as one string: its kind, every option but the cadence, and
    the content of the task files it reads (where it reads any)."""
    return json.dumps({"kind": kind, **options, **({"data": data} if data else {})},
                      sort_keys=True)


def task_data(options: dict, workdir: str) -> str:
    """A short hash of the files of the task an evaluator reads; '' for a kind that reads
    none, or a task folder not there yet (the embedded suite before its first build)."""
    if "task" not in options:
        return ""
    folder = options["tasks"] or os.path.join(workdir, TASKS)
    if not os.path.isdir(folder):
        return ""
    from encoder.eval import identity
    from encoder.tasks import catalog
    try:
        found, _ = catalog.discover(folder, [options["task"]])
    except (FileNotFoundError, ValueError):
        return ""
    files = {k: v["sha256"] for k, v in identity.files_identity(found[0].files).items()}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def planned_keys(evals, checkpoint_every: int = 1, workdir: str = "") -> dict:
    """{name: key} of config.evals (with its task files' hash where workdir's or the
    given task folder is there)."""
    return {name: key(kind, options, task_data(options, workdir))
            for name, kind, _, options in parse(evals, checkpoint_every)}


def recorded_keys(workdir: str) -> dict:
    """{name: {key: [steps]}} of WORKDIR/evals.jsonl: the protocols its scores were made
    under ({} when nothing was scored)."""
    from encoder.train import metrics_io
    out: dict = {}
    for (name, step, k) in metrics_io.ScoreRecord(workdir).scores:
        out.setdefault(name, {}).setdefault(k, []).append(step)
    return out


def option_changes(old: str, new: str) -> str:
    """'max_train: 1000 -> 50, layer: -1 -> 2' between two keys."""
    a, b = json.loads(old), json.loads(new)
    return ", ".join((f"its task files changed (sha256 {a.get(k)} -> {b.get(k)})" if k == "data"
                      else f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
                     for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def protocol_changes(planned: dict, recorded: dict) -> list[str]:
    """The declared evaluators whose options differ from those the record's scores were
    made under, one line each (name, steps scored, what changed): [] when none does."""
    out = []
    for name, new in planned.items():
        blind = "data" not in json.loads(new)  # its task files not there to compare yet
        for old, steps in (recorded.get(name) or {}).items():
            if blind:
                old = json.dumps({k: v for k, v in json.loads(old).items() if k != "data"},
                                 sort_keys=True)
            if old != new:
                steps = sorted(steps)
                at = ", ".join(map(str, steps[:4])) + (", ..." if len(steps) > 4 else "")
                out.append(f"config.evals.{name} ({option_changes(old, new)}; scored at "
                           f"step {at} under the old options)")
    return out


def check_record(evals, checkpoint_every: int, workdir: str) -> None:
    """Refuses to resume a run whose declared evaluator changed its options since it scored
    (one curve, one metric name, two protocols), before any work."""
    if not evals or not os.path.isdir(workdir):
        return
    changed = protocol_changes(planned_keys(evals, checkpoint_every, workdir),
                               recorded_keys(workdir))
    if changed:
        raise UsageError(
            f"{workdir}: {changed[0]}: its curve would mix two protocols under one name; "
            "restore the option, declare the changed evaluator under a new name in the "
            "config, or start a new workdir" + (f" ({len(changed) - 1} more)"
                                               if len(changed) > 1 else ""))


# ------------------------------------------------------------------------------ kinds

def _task(context: Context, options: dict, kinds: tuple):
    from encoder.tasks import catalog
    folder = context.tasks_dir(options)
    found, _ = catalog.discover(folder, [options["task"]])
    if not found:
        raise UsageError(f"config.evals: no task {options['task']!r} in {folder}")
    task = found[0]
    if task.kind not in kinds and task.type not in kinds:
        raise UsageError(f"config.evals: task {task.name!r} in {folder} is a {task.type} "
                         f"task; this evaluator reads {' or '.join(kinds)} tasks")
    return task


def _heldout(context: Context, options: dict):
    if context.held_out is None:
        raise UsageError("config.evals: kind=heldout needs a held-out set (data.valid_files, "
                         "or the embedded corpus's split)")
    ev = context.held_out(options["batches"])
    return lambda params, step: {k.split("/", 1)[-1]: v for k, v in ev(params, step).items()}


def _embedding(context: Context, options: dict):
    from encoder.tasks import embedding
    task = _task(context, options, ("sts", "retrieval"))
    max_len = options["max_len"] or context.seq_len

    def score(params, step):
        del step
        encode = embedding.encoder_fn(context.model_cfg, params, context.tokenizer,
                                      options["pooling"], max_len)
        return embedding.evaluate(task, encode, options["max_eval"])
    return score


def _probe(context: Context, options: dict):
    from encoder.jobs import probe
    task = _task(context, options, tuple(k for k in probe.TASKS if probe.probed(k)))
    train, dev, kind = probe.read_task(task.folder, options["max_train"], seed=0)
    max_len = options["max_len"] or context.seq_len

    def score(params, step):
        del step
        out = probe.probe_examples(context.model_cfg, params, context.tokenizer, train, dev,
                                   kind, max_len)
        layer = options["layer"]
        return {"score": out["layers"][layer], "control": out["control"][layer],
                "best_layer": int(max(range(len(out["layers"])),
                                      key=lambda i: out["layers"][i]))}
    return score


COMMON = {"every": 0}  # 0: train.checkpoint_every
KINDS = {
    "heldout": Kind({"batches": 8}, _heldout,
                    doc="the objective's held-out metrics on `batches` fixed batches"),
    "embedding": Kind({"task": None, "tasks": "", "pooling": "mean", "max_len": 0,
                       "max_eval": 500}, _embedding, ("sts", "retrieval"),
                      "a frozen-embedding task (STS Spearman, retrieval nDCG/recall)"),
    "probe": Kind({"task": None, "tasks": "", "layer": -1, "max_train": 1000, "max_len": 0},
                  _probe, ("probe",),
                  "a linear probe on one layer's frozen features (score, shuffled-label "
                  "control, best layer)"),
}


# --------------------------------------------------------------------- the declaration

def parse(evals, checkpoint_every: int, num_layers: int | None = None
          ) -> list[tuple[str, str, int, dict]]:
    """[(name, kind, every, options with defaults)] from config.evals, every field checked
    (before any data is read): an unknown kind or option, a missing task or task folder, a
    bad cadence, pooling or layer (against the model's `num_layers` where given)."""
    out = []
    for name, entry in (evals or {}).items():
        entry = dict(entry)
        where = f"config.evals.{name}"
        kind = entry.pop("kind", None)
        if kind not in KINDS:
            raise UsageError(f"{where}.kind={kind!r}: expected one of {', '.join(KINDS)}")
        spec = KINDS[kind]
        every = entry.pop("every", COMMON["every"])
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise UsageError(f"{where}.every={every!r}: a number of steps (0: each "
                             "checkpoint, train.checkpoint_every)")
        # entry() filled every option of the kind it was made for: those left at another
        # kind's default are its filling, dropped when a flag changes the kind
        entry = {k: v for k, v in entry.items() if k in spec.options
                 or not any(k in o.options and o.options[k] == v for o in KINDS.values())}
        unknown = sorted(set(entry) - set(spec.options))
        if unknown:
            raise UsageError(f"{where}: unknown option {unknown[0]!r} for kind={kind}; "
                             f"its options: every, {', '.join(spec.options)}")
        options = {**spec.options, **entry}
        missing = [k for k, v in options.items() if v is None]
        if missing:
            raise UsageError(f"{where}: kind={kind} needs {missing[0]}=...")
        _check_options(where, options, num_layers)
        if "task" in options and not options["tasks"]:
            _check_embedded(where, options["task"], spec.task_kinds)
        out.append((name, kind, every or checkpoint_every, options))
    return out


def _check_options(where: str, options: dict, num_layers: int | None) -> None:
    from encoder.model import heads
    if "pooling" in options and options["pooling"] not in heads.POOLING:
        raise UsageError(f"{where}.pooling={options['pooling']!r}: expected one of "
                         f"{', '.join(heads.POOLING)}")
    if options.get("tasks"):
        options["tasks"] = os.path.normpath(options["tasks"])  # DIR/ is DIR: one protocol
        if not os.path.isdir(options["tasks"]):
            raise UsageError(f"{where}.tasks={options['tasks']!r} is not a folder (a suite "
                             "task folder: python -m encoder tasks --out DIR "
                             "writes one)")
        from encoder.tasks import catalog
        try:
            catalog.discover(options["tasks"], [options["task"]])  # e.g. no dev.jsonl
        except (FileNotFoundError, ValueError) as e:
            raise UsageError(f"{where}.task={options['task']!r}: {e}") from None
    for name in ("max_len", "max_eval", "max_train", "batches"):
        v = options.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0
                              or (name == "batches" and v == 0)):
            raise UsageError(f"{where}.{name}={v!r}: a whole number, at least "
                             f"{1 if name == 'batches' else 0}")
    if "layer" in options:
        layer, top = options["layer"], num_layers
        if not isinstance(layer, int) or isinstance(layer, bool) or (
                top is not None and not -(top + 1) <= layer <= top):
            span = (f"0 (the embeddings) to {top}, or -1 for the last" if top is not None
                    else "a layer index")
            raise UsageError(f"{where}.layer={layer!r}: the model has "
                             f"{top if top is not None else 'its'} layers: give {span}")


def entry(kind: str, **options) -> dict:
    """A config.evals entry with every option at its default unless given (so each can be
    overridden from the command line: --config.evals.NAME.max_eval=200)."""
    if kind not in KINDS:
        raise UsageError(f"config.evals: kind={kind!r}: expected one of {', '.join(KINDS)}")
    return {"kind": kind, **COMMON, **KINDS[kind].options, **options}


def from_tasks(names: list) -> dict:
    """config.evals for suite tasks by name (the embedded suite): an embedding evaluator for
    an STS or retrieval task, a probe of the last layer otherwise; each at every
    checkpoint."""
    from encoder.data import embedded_tasks
    out = {}
    for name in names:
        if name == "heldout":  # the objective's held-out figures, on more batches
            out[name] = entry("heldout")
            continue
        meta = embedded_tasks.TASK_META.get(name)
        if meta is None:
            raise UsageError(f"evals={name!r}: the embedded suite has "
                             f"{', '.join(embedded_tasks.TASK_META)} (or heldout: the "
                             "objective's held-out figures)")
        kind = "embedding" if meta["type"] in ("sts", "retrieval") else "probe"
        if kind == "probe":
            from encoder.jobs import probe
            if not probe.probed(meta["type"]):
                able = [n for n, m in embedded_tasks.TASK_META.items()
                        if m["type"] in ("sts", "retrieval") or probe.probed(m["type"])]
                raise UsageError(f"evals={name!r}: a {meta['type']} task has no frozen "
                                 f"evaluator (it needs fine-tuning: encoder suite --watch); "
                                 f"choose from {', '.join(able)}")
        out[name] = entry(kind, task=name)
    return out


def set_from_tasks(config, value: str) -> None:
    """The experiment option evals=sts_relatedness+topic (from_tasks); evals=none: none."""
    import ml_collections
    config.evals = ml_collections.ConfigDict(
        from_tasks([] if value in ("", "none") else str(value).split("+")))


def _check_embedded(where: str, task: str, kinds: tuple) -> None:
    from encoder.data import embedded_tasks
    meta = embedded_tasks.TASK_META.get(task)
    if meta is None:
        raise UsageError(f"{where}.task={task!r}: the embedded suite has "
                         f"{', '.join(embedded_tasks.TASK_META)} (or give tasks=DIR)")
    if "probe" in kinds:
        from encoder.jobs import probe
        ok = probe.probed(meta["type"])
    else:
        ok = meta["type"] in kinds
    if not ok:
        raise UsageError(f"{where}.task={task!r} is a {meta['type']} task; this kind reads "
                         + ("tasks with a probe" if "probe" in kinds else " or ".join(kinds)))


def build(evals, checkpoint_every: int, context: Context) -> list[Declared]:
    """The declared evaluators, ready to call (the embedded suite built first if any
    of them reads it)."""
    parsed = parse(evals, checkpoint_every, context.model_cfg.num_layers)
    if any("task" in o and not o["tasks"] for _, _, _, o in parsed):
        _embedded_tasks(context.workdir)
    return [Declared(name, kind, every, options, KINDS[kind].build(context, options),
                     task_data(options, context.workdir))
            for name, kind, every, options in parsed]


def _embedded_tasks(workdir: str) -> None:
    import jax
    from encoder.data import embedded_tasks
    if jax.process_index() == 0:
        embedded_tasks.build_once(os.path.join(workdir, TASKS))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("encoder: the embedded tasks are built")
