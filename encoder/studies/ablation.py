"""Ablation studies: one command sweeps variants and writes the comparison.

    python -m encoder ablate --config=experiments/pretrain.py:size=tiny \\
        --sweep=model.position=learned,sinusoidal,rope,alibi,t5_bias --sweep=objective=mlm,rtd \\
        --seeds=3 --workdir=DIR [--zip] [--parallel=2] [--equal_flops] \\
        [--finetune=experiments/finetune.py:task=classification --finetune_data=TASK_DIR
         --finetune_set=train.learning_rate=1e-3]
        [--suite=TASKS_DIR|embedded --suite_arg=--preset=runlocal ...]
        [--launcher=local|slurm|tpu_vm --slurm_partition=P --slurm_time=4:00:00 ... --detach]
    python -m encoder ablate --config=experiments/pretrain.py --wsd_budgets=150,300,450 \
        [--wsd_decay_fraction=0.2 --wsd_shape=linear] [--sweep=...] --workdir=DIR

Each sweep is `field=v1,v2,...`, the field an experiment option (objective,
position, ...) or a dotted config path (model.position, train.learning_rate).
Sweeps combine as a cartesian product (or zipped with --zip). Every variant
runs once per seed index with config.seed = seed index, so variants share the
data order and initialisation seed. Each run lives in
DIR/runs/<variant>__seed<k>/ with its whole resolved config beside it
(job_config.py), runs as its own `encoder run` job through the study runner
(encoder/studies/runner.py: at most --parallel at once locally), and is skipped
when its job recorded that it finished; an interrupted run resumes from its
checkpoint, a run whose configuration changed is moved aside and rerun.
--launcher=slurm sends the runs as one job array (--parallel caps how many run
at once; encoder/studies/launchers/slurm.py); the results are the same files. --equal_flops gives
every variant the first variant's compute budget (steps = budget / FLOPs per
step), as the ELECTRA paper compares MLM and RTD. --wsd_budgets makes it a WSD study: per
variant and seed one stable run, and per budget a decay started from its checkpoint
(`wsd_runs`), so K budgets cost one stable run plus K short decays, not K whole runs; the
decays are the variants compared. Rows of runs in phases carry their tokens per phase.
A data ablation sweeps a mixture's fields (--sweep=data.sources.web.weight=0.5,1
--sweep=data.temperature=0.3,0.7); each row then names the mixture the run realised
(mixture/<source>: its share of the tokens read, from metrics.jsonl's data/<source>/tokens).

Outputs: DIR/runs.csv (one row per run), DIR/results.csv and DIR/results.md
(one row per variant: mean ± std over seeds, and the gap to the best variant
in units of its standard error), DIR/loss_curves.png, DIR/final_metric.png.
--suite runs the downstream suite (`python -m encoder suite`, encoder/studies/suite/)
on every pretraining run, in <run>/suite/, and adds its average (and each task's
median) as suite/* columns; the suite average is then the primary metric.

What every row scored is in runs.csv: the run's final checkpoint (step, content hash)
and its data's hashes (encoder/eval/identity.py); each run records what it read in
inputs.json, and a done run whose data (or start checkpoint) changed since is rerun. Two
--sweep flags on one field (or an option and the field it sets) are refused, as is a
second command on a study folder while one runs (DIR/LOCK, as a workdir's).
"""
import dataclasses
import itertools
import json
import math
import os

import numpy as np

from encoder import config as config_lib, errors, ranges
from encoder.eval import identity
from encoder.studies import jobconfig, records, report, runner, stats
from encoder.train import flops

HASHES = ".hashes.json"  # DIR/: each hashed data file's sha256 by size and date
# Fields that change how a pretraining run is carried out, not what it trains (the ones a
# resume may change: encoder/jobs/pretrain.py MUTABLE, less the run's length, its phases
# and debug_nan_at_step, which makes a run fail on purpose); grad_accum_steps cuts the same
# global batch into other micro-batches.
SAME_TRAINING = ("train.log_every", "train.eval_every", "train.eval_batches",
                 "train.grad_accum_steps", "train.checkpoint_every", "train.keep_checkpoints",
                 "train.progress", "train.peak_flops", "data.cache_dir", "mesh", "distributed",
                 "model.attention_impl", "model.remat", "model.scan_layers")
# The config fields naming what a pretraining run reads (its tokenizer and corpora).
DATA_FIELDS = ("train_files", "valid_files", "tokenizer")



def parse_sweep(spec: str) -> tuple[str, list]:
    field, sep, values = spec.partition("=")
    if not sep or not values:
        raise ValueError(f"--sweep={spec!r}: expected field=v1,v2,...")
    found = [config_lib.coerce(v.strip()) for v in values.split(",") if v.strip()]
    repeated = sorted({str(v) for v in found if found.count(v) > 1})
    if repeated:  # one run reported as two seeds with spread 0
        raise ValueError(f"--sweep={spec!r} repeats {', '.join(repeated)}: give each value once "
                         "(use --seeds for repeats)")
    return field.strip(), found


def expand(sweeps: list[tuple[str, list]], zipped: bool) -> list[dict]:
    """Variants as {field: value} dicts, in a stable order."""
    if not sweeps:
        return [{}]
    fields = [f for f, _ in sweeps]
    if zipped:
        lengths = {len(v) for _, v in sweeps}
        if len(lengths) != 1:
            raise ValueError(f"--zip needs sweeps of equal length, got {sorted(lengths)}")
        combos = zip(*[v for _, v in sweeps])
    else:
        combos = itertools.product(*[v for _, v in sweeps])
    return [dict(zip(fields, c)) for c in combos]


def _flat(config) -> dict:
    from encoder.train.workdir import flatten
    return flatten(config.to_dict())


def touched_fields(base, field: str, values: list) -> set:
    """The config paths a sweep sets: its dotted field, or what an experiment option (size,
    position, mask_rate, ...) changes in `base` for any of its values."""
    if field not in config_lib.OPTIONS:
        return {field}
    before, touched = _flat(base), set()
    for value in values:
        try:
            after = _flat(apply_variant(base, {field: value}))
        except Exception:  # noqa: BLE001 - a bad value is refused by plan(), with its reason
            continue
        touched |= {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    return touched or {field}


def check_sweeps(sweeps: list[tuple[str, list]], base=None) -> None:
    """One --sweep per config field: a second on the same field (or an option that sets the
    same field, e.g. position and model.position) would silently override the first, so
    the first's variants would never run (a rope variant once vanished from the table)."""
    seen: dict = {}
    for field, values in sweeps:
        if field.startswith(("evals.", "config.evals.", "evals:")) or field == "evals":
            raise errors.UsageError(
                f"--sweep={field}=...: config.evals changes what a run is scored by, not the "
                "run: its variants would train identical models and their scores would not "
                "be compared; declare each evaluator under its own name in one config")
        same = next((m for m in SAME_TRAINING if field.removeprefix("config.") == m
                     or field.removeprefix("config.").startswith(m + ".")), None)
        if same is not None:
            raise errors.UsageError(
                f"--sweep={field}=...: {same} changes how a run is carried out (logged, "
                "checkpointed, placed, compiled), not what it trains: its variants would train "
                "one model, and the table would rank what the setting does to the figures "
                f"(a logging window's average); set it for every run with --config.{same}=VALUE")
        if field in ("seed", "config.seed"):
            raise errors.UsageError(f"--sweep={field}=...: every variant already runs once per "
                                    "seed index (config.seed = 0 .. --seeds-1); give "
                                    "--seeds=N instead of sweeping the seed")
        if field in seen:
            merged = ",".join(str(v) for v in dict.fromkeys(seen[field][1] + values))
            raise errors.UsageError(
                f"--sweep={field}=... is given twice: each variant sets {field} once, so "
                f"the first sweep's values would never run; give one --sweep with every "
                f"value (--sweep={field}={merged})")
        seen[field] = (touched_fields(base, field, values) if base is not None else {field},
                       list(values))
    fields = list(seen)
    for i, a in enumerate(fields):
        for b in fields[i + 1:]:
            common = sorted(seen[a][0] & seen[b][0])
            if common:
                raise errors.UsageError(
                    f"--sweep={a}=... and --sweep={b}=... both set {', '.join(common)}: the "
                    "second would override the first in every variant; sweep that field "
                    "once, with every value in one --sweep")


def apply_variant(config, variant: dict):
    """Sets each field: an experiment option name, or a dotted config path."""
    from encoder import config as config_lib
    config = config.copy_and_resolve_references()
    for field, value in variant.items():
        if field in config_lib.OPTIONS:
            config_lib.OPTIONS[field](config, value)
            continue
        try:
            jobconfig.set_field(config, field, value)
        except ValueError as e:
            raise ValueError(f"--sweep {e}") from None
    return config


def variant_name(variant: dict) -> str:
    return ",".join(f"{_short_field(k)}={v}" for k, v in variant.items()) or "base"


def _short_field(field: str) -> str:
    """A field's name in a variant's: its last part; a mixture source's field keeps its
    source (data.sources.web.weight -> web.weight), so two sources' weights stay apart."""
    parts = field.split(".")
    return ".".join(parts[2:]) if parts[:2] == ["data", "sources"] and len(parts) == 4 \
        else parts[-1]


def realised_mixture(rows: list[dict]) -> dict:
    """mixture/<source>: each source's share of the tokens a run read, from its last
    metrics row that has data/<source>/tokens (a run on a mixture); {} otherwise."""
    for r in reversed(rows):
        tokens = {k.split("/")[1]: v for k, v in r.items()
                  if k.startswith("data/") and k.endswith("/tokens")}
        if tokens and sum(tokens.values()) > 0:
            total = sum(tokens.values())
            return {f"mixture/{n}": t / total for n, t in tokens.items()}
    return {}


def mixture_text(entry: dict) -> str:
    """'web 70%, code 30%': a table entry's realised mixture (its mixture/* means)."""
    return ", ".join(f"{k.split('/', 1)[1]} {100 * v:.0f}%" for k, v in entry.items()
                     if k.startswith("mixture/") and not k.endswith("_std"))


def phase_budget(config) -> dict:
    """What a run in phases (or its one implicit phase) will spend: steps, analytic FLOPs
    and tokens, in total and per phase (a batch-warmup phase's FLOPs at its full batch)."""
    from encoder.train import phases as phases_lib
    plan_ = phases_lib.plan(config)
    out = {"steps": plan_.total_steps, "flops": 0.0, "tokens": plan_.tokens_after(
        plan_.total_steps), "phases": {}}
    for ph in plan_.phases:
        f = flops.config_train_flops_per_step(ph.config) * ph.steps
        out["flops"] += f
        out["phases"][ph.name] = {"steps": ph.steps, "flops": f, "start": ph.tokens_before,
                                  "tokens": ph.tokens_after(ph.end) - ph.tokens_before}
    return out


def plan(base, variants: list[dict], seeds: int, equal_flops: bool) -> list[dict]:
    """One entry per run: name, seed, resolved config, and its planned budget."""
    from encoder.jobs import pretrain
    runs, budget = [], None
    for variant in variants:
        config = apply_variant(base, variant)
        ranges.check(config, f"variant {variant_name(variant)!r}")  # before it is sized
        fps = flops.config_train_flops_per_step(config)
        if equal_flops:
            if config.get("phases"):
                raise ValueError("--equal_flops scales train.num_steps; a recipe in phases "
                                 "has a budget per phase: sweep the phases' budgets instead")
            budget = budget or config.train.num_steps * fps
            config.train.num_steps = max(1, int(round(budget / fps)))
        for seed in range(seeds):
            c = config.copy_and_resolve_references()
            c.seed = seed
            pretrain.validate(c)
            runs.append({"variant": variant_name(variant), "seed": seed, "config": c,
                         "flops_per_step": fps, "budget": phase_budget(c),
                         "dir": f"{variant_name(variant).replace('/', '_')}__seed{seed}"})
    return runs


def wsd_runs(planned: list[dict], root: str, budgets, fraction: float = 0.2,
             shape: str = "linear") -> tuple[list[dict], list[dict]]:
    """(stable runs, decay runs) of a WSD study (Hägele et al. 2024): per planned run one
    stable run to the largest decay start, checkpointed at every start; per budget B a run
    whose phases are stable to S = B - round(fraction B) then a decay of B - S steps, started
    from the stable run's step S with its optimizer state and data position (init_state=full:
    equal to the same decay inside one run, tests/e2e/test_phases_runs.py)."""
    from encoder.jobs import pretrain
    from encoder.train import phases as phases_lib
    budgets = sorted({int(b) for b in budgets})
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--wsd_decay_fraction must be in (0, 1), got {fraction}")
    starts = {b: b - max(1, round(fraction * b)) for b in budgets}
    if not budgets or min(starts.values()) < 1:
        raise ValueError(f"--wsd_budgets must be steps of at least 2, got {budgets}")
    every, last = math.gcd(*starts.values()), max(starts.values())
    stables, decays = [], []
    for r in planned:
        if r["config"].get("phases"):
            raise ValueError("--wsd_budgets writes the phases itself: the base recipe must "
                             "have none (experiments/pretrain.py, not experiments/wsd.py)")
        c = r["config"].copy_and_resolve_references()
        c.phases = phases_lib.wsd_phases(last, 0, shape)
        c.train.checkpoint_every, c.train.keep_checkpoints = every, last // every + 1
        pretrain.validate(c)
        stable = {**r, "variant": f"{r['variant']} (stable)", "config": c,
                  "budget": phase_budget(c), "dir": f"{r['dir']}__stable"}
        stables.append(stable)
        for b in budgets:
            d = r["config"].copy_and_resolve_references()
            d.phases = phases_lib.wsd_phases(starts[b], b - starts[b], shape)
            d.init_from, d.init_step, d.init_state = run_dir(stable, root), starts[b], "full"
            pretrain.validate(d)
            name = (f"{r['variant']},budget={b}" if r["variant"] != "base" else f"budget={b}")
            decays.append({**r, "variant": name, "config": d, "budget": phase_budget(d),
                           "dir": f"{name.replace('/', '_')}__seed{r['seed']}"})
    return stables, decays


def run_dir(run: dict, root: str) -> str:
    return os.path.join(root, "runs", run["dir"])


def pretraining_inputs(config, cache=None) -> dict:
    """What a pretraining run reads beyond its config: its corpora's and tokenizer's
    content, and the checkpoint it starts from (init_from: a WSD decay's stable run at its
    step) by identity (encoder/eval/identity.py). A done run whose inputs changed since
    is rerun (records.inputs_changed)."""
    data = {k: identity.corpus_identity(config.data[k], cache) for k in DATA_FIELDS
            if config.data.get(k)}
    for name, source in (config.data.get("sources") or {}).items():  # a mixture's files
        if source.get("files"):
            data[f"sources.{name}"] = identity.corpus_identity(source["files"], cache)
    out = {"data": data}
    if config.get("init_from"):
        step = config.get("init_step", -1)
        out["source"] = identity.source_identity(config.init_from, cache,
                                                 step if step is not None and step >= 0
                                                 else None)
    return out


def pretraining_runs(planned: list[dict], root: str) -> list:
    """The study's pretraining runs for the runner: <root>/runs/<variant>__seed<k>/."""
    cache = identity.HashCache(os.path.join(root, HASHES))
    runs = [runner.make_run(r["dir"], run_dir(r, root), r["config"],
                            pretraining_inputs(r["config"], cache)) for r in planned]
    cache.save()
    return runs


def finetuning_runs(planned: list[dict], root: str, experiment: str, data: str,
                    sets: list) -> list:
    """One fine-tuning run per pretraining run, in <run>/finetune/ (started from it)."""
    base = jobconfig.load_experiment(experiment)
    out = []
    for r in planned:
        d = run_dir(r, root)
        config = jobconfig.override(base, {
            "init_from": d, "data.train_file": os.path.join(data, "train.jsonl"),
            "data.dev_file": os.path.join(data, "dev.jsonl"), "seed": r["seed"],
            **jobconfig.parse_sets(sets)})
        inputs = {"source": identity.source_identity(d), "data": identity.files_identity(
            {"train": config.data.train_file, "dev": config.data.dev_file})}
        out.append(runner.make_run(f"{r['dir']}/finetune", os.path.join(d, "finetune"), config,
                                   inputs))
    return out


def study_tasks(root: str, tasks: str) -> str:
    """The suite's tasks folder for every run and watcher of the study: the embedded suite
    ('' or 'embedded') built once into STUDY/tasks, not once per run or checkpoint."""
    if tasks and tasks != "embedded":
        return tasks
    from encoder.data import embedded_tasks
    return embedded_tasks.build_once(os.path.join(root, "tasks"))


def watch_runs(planned: list[dict], root: str, tasks: str, extra: list) -> list:
    """One watcher per pretraining run (encoder/studies/watch.py): the suite on each of its
    checkpoints while it trains, into STUDY/watch/<run> (the curves' source), as a run of
    the study beside its run (its records in STUDY/watch_jobs/<run>: not inside the run's
    folder, which only the run itself may create)."""
    out, tasks = [], study_tasks(root, tasks)
    for r in planned:
        d = run_dir(r, root)
        args = [f"--tasks={tasks}", "--watch_follow_job", "--watch_poll=5"] + list(extra)
        config = {"mode": "suite", "suite": {"watch": d, "out": os.path.join(
            root, "watch", r["dir"]), "args": args}}
        out.append(runner.make_run(f"{r['dir']}/watch", os.path.join(
            root, "watch_jobs", r["dir"]), config))
    return out


def watch_line(study) -> str:
    """What each watcher runs on every checkpoint, said before the first starts
    (--watch alone once fine-tuned the whole default suite on each checkpoint, unsaid)."""
    args = list(study.suite_args)
    tasks = study.suite if study.suite and study.suite != "embedded" else "the embedded suite"
    line = (f"watchers: encoder suite --watch=RUN {' '.join(args)} on each checkpoint "
            f"({tasks}")
    if not any(a.startswith("--probe_only") for a in args):
        return (line + ", fine-tuning every task at each checkpoint: "
                "--suite_arg=--probe_only scores frozen embeddings and probes only)")
    return line + ")"


def with_watchers(runs: list, watchers: list) -> list:
    """Each run followed by its watcher: with runs at once capped, a run starts before the
    watchers of later runs (a watcher started after its run scores what it kept)."""
    return [x for pair in zip(runs, watchers) for x in pair] if watchers else runs


def suite_runs(planned: list[dict], root: str, tasks: str, extra: list) -> list:
    """One suite job per pretraining run (encoder/jobs/suite.py): its records in
    <run>/suite_job/, its scores in <run>/suite/; run by the study's launcher, like the
    pretraining runs. The run it scores is its input: trained on since, it is rerun."""
    out, tasks = [], study_tasks(root, tasks)
    for r in planned:
        d = run_dir(r, root)
        args = [f"--tasks={tasks}"] + list(extra)
        config = {"mode": "suite", "suite": {"init_from": d, "out": os.path.join(d, "suite"),
                                             "args": args}}
        out.append(runner.make_run(f"{r['dir']}/suite", os.path.join(d, "suite_job"), config,
                                   {"source": identity.source_identity(d)}))
    return out


def execute(runs: list, launcher) -> bool:
    """Runs what is not done; every failure is reported (none hides another), then raised.
    False when the launcher returned before its runs ended (--detach, --dry_run)."""
    _, failures = runner.execute(runs, launcher)
    if failures:
        raise runner.failures_error(failures)
    return not launcher.detached


# ----------------------------------------------------------------------------- results

def read_run(run: dict, root: str) -> dict:
    from encoder.train import metrics_io
    d = os.path.join(root, "runs", run["dir"])
    rows = metrics_io.read_metrics(d)
    train = [r for r in rows if "train/loss" in r]
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    budget = run.get("budget") or phase_budget(run["config"])
    tps = [r["train/tokens_per_s"] for r in train[1:]] or [r["train/tokens_per_s"] for r in train]
    out = {"variant": run["variant"], "seed": run["seed"], "dir": run["dir"],
           "steps": budget["steps"],
           "final_train_loss": train[-1]["train/loss"] if train else float("nan"),
           "tokens_per_s": float(np.mean(tps)) if tps else float("nan"),
           "flops": budget["flops"],
           "curve": [(r["step"], r["train/loss"]) for r in train]}
    # tokens as the run counted them (each row's cumulative `tokens`), in total and per phase
    counted = [r for r in train if "tokens" in r]
    if counted:
        out["tokens"] = counted[-1]["tokens"]
        if len(budget["phases"]) > 1:  # a phase's tokens: its last row's count less its start
            for name, ph in budget["phases"].items():
                mine = [r["tokens"] for r in counted if r.get("phase") == name]
                if mine:
                    out[f"tokens/{name}"] = mine[-1] - ph["start"]
    out.update(realised_mixture(train))
    if evals:
        out.update({k: v for k, v in evals[-1].items() if k.startswith("eval/")})
    for r in rows:  # config.evals: each metric's last score (the final checkpoint's)
        out.update({k: v for k, v in r.items() if k.startswith("evals/")})
    from encoder.jobs import evals as evals_lib
    for name, keys in evals_lib.recorded_keys(d).items():  # the protocol of that last score
        out[f"protocol/{name}"] = max(keys.items(), key=lambda kv: max(kv[1]))[0]
    # what the row scored: the run's final checkpoint (step, content hash) and its data
    try:
        scored = identity.source_identity(d)
        out["checkpoint"] = identity.short(scored)
        out["checkpoint_step"] = scored["step"]
    except FileNotFoundError:
        out["checkpoint"], out["checkpoint_step"] = "none", None
    recorded = records.read_inputs(d) or {}
    out["data"] = " ".join(f"{k.split('.')[-1]}:{v['sha256']}"
                           for k, v in (recorded.get("data") or {}).items())
    ft = os.path.join(d, "finetune", "eval.json")
    if os.path.exists(ft):
        with open(ft) as f:
            for k, v in json.load(f).get("dev", {}).items():
                out[f"finetune/{k}"] = v
    # the suite's scores: its own run's, else the watcher's of the final checkpoint
    watched = os.path.join(root, "watch", run["dir"], f"step_{out['checkpoint_step'] or 0:07d}")
    for folder in (os.path.join(d, "suite"), watched):
        if os.path.exists(os.path.join(folder, "suite.json")):
            from encoder.studies.suite import battery
            out.update(battery.suite_average(folder))
            break
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    from encoder.objectives import objectives
    import ml_collections
    out["objective"] = cfg.get("objective", "mlm")
    out["parameters"] = objectives.parameter_count(ml_collections.ConfigDict(cfg))[1]
    return out


DOWNSTREAM = ("suite/average", "finetune/accuracy", "finetune/f1", "finetune/pearson")
PRETRAINING = ("eval/mlm_accuracy", "eval/rtd_accuracy", "eval/loss")
# a declared evaluator's metrics that are not a downstream score (encoder/jobs/evals.py)
NOT_A_SCORE = ("loss", "mlm_", "rtd_", "gen_", "control", "best_layer")


def primary_metric(rows: list[dict]) -> str | None:
    """The metric the study ranks by: a downstream score every row has (the suite's average,
    the fine-tuning's, a declared evaluator's), else a pretraining figure; None when the
    rows train different objectives and share no downstream score (their held-out figures
    measure different things: RTD's eval/mlm_accuracy is its generator's)."""
    declared = sorted({k for r in rows for k in r if k.startswith("evals/")
                       and not k.rsplit("/", 1)[-1].startswith(NOT_A_SCORE)
                       and len(protocol_groups(rows, k.split("/")[1])) <= 1})
    for key in DOWNSTREAM + tuple(declared):
        if all(key in r for r in rows):
            return key
    if len({r.get("objective", "mlm") for r in rows}) > 1:
        return None
    for key in PRETRAINING:
        if all(key in r for r in rows):
            return key
    return "final_train_loss"


def protocol_groups(rows: list[dict], name: str) -> dict:
    """{protocol (encoder/jobs/evals.py key): [variants scored under it]} of a declared
    evaluator across the rows: a score made under two protocols is never ranked."""
    groups: dict = {}
    for r in rows:
        if f"protocol/{name}" in r:
            groups.setdefault(r[f"protocol/{name}"], []).append(r["variant"])
    return groups


def mixed_protocols(rows: list[dict]) -> list[str]:
    """A line per declared evaluator whose rows were scored under different options: each
    protocol's differing options and the variants scored under it."""
    import json
    out = []
    for name in sorted({k.split("/")[1] for r in rows for k in r if k.startswith("evals/")}):
        groups = protocol_groups(rows, name)
        if len(groups) < 2:
            continue
        options = [json.loads(k) for k in groups]
        differ = sorted({o for d in options for o in d
                         if len({json.dumps(e.get(o)) for e in options}) > 1})
        each = "; ".join(" ".join(f"{o}={d.get(o)}" for o in differ)
                         + f" ({', '.join(dict.fromkeys(v))})"
                         for d, v in zip(options, groups.values()))
        out.append(f"**evals/{name} is not compared: its runs were scored under different "
                   f"options: {each}.**")
    return out


def check_protocols(planned: list[dict], root: str) -> None:
    """Refuses a study whose declared evaluators changed options since its runs scored
    them: the finished runs would be skipped with their old scores and ranked beside new
    ones; refused before anything is launched."""
    from encoder.jobs import evals as evals_lib
    for r in planned:
        if not r["config"].get("evals"):
            continue
        d = run_dir(r, root)
        changed = evals_lib.protocol_changes(evals_lib.planned_keys(r["config"].evals, 1, d),
                                             evals_lib.recorded_keys(d))
        if changed:
            raise errors.UsageError(
                f"run {r['dir']}: {changed[0]}: the study's table would rank scores made "
                "under two protocols; restore the option, or run the study with the new "
                "options in a new --workdir")


def check_equal_flops(sweeps: list[tuple[str, list]], base) -> None:
    """--equal_flops sets each variant's train.num_steps: a sweep that sets it too would be
    overridden in silence (num_steps=4,8 once trained both for 4 steps)."""
    for field, values in sweeps:
        if "train.num_steps" in touched_fields(base, field, values):
            raise errors.UsageError(
                f"--sweep={field}=... sets train.num_steps, which --equal_flops sets for "
                "every variant (to match the first variant's FLOPs): drop --equal_flops to "
                "compare step budgets, or sweep another field")


def no_common_metric(rows: list[dict]) -> str:
    objectives = ", ".join(dict.fromkeys(r.get("objective", "mlm") for r in rows))
    return (f"**No ranking: the variants train different objectives ({objectives}),** whose "
            "held-out figures measure different things (an RTD run's eval/mlm_accuracy is its "
            "generator's); compare them downstream: --suite=embedded, --finetune, or a "
            "config.evals evaluator (experiments/pretrain.py:evals=sts_relatedness).")


def aggregate(rows: list[dict]) -> tuple[list[dict], list[str]]:
    keys = ["final_train_loss"] + sorted({k for r in rows for k in r if k.startswith(
        ("eval/", "evals/", "finetune/", "suite/"))}) + ["tokens_per_s", "flops", "parameters", "steps"]
    keys += [k for k in dict.fromkeys(k for r in rows for k in r)
             if k == "tokens" or k.startswith(("tokens/", "mixture/"))]
    table = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        group = [r for r in rows if r["variant"] == variant]
        entry = {"variant": variant, "seeds": len(group)}
        for k in keys:
            vals = np.asarray([r[k] for r in group if k in r], float)
            if len(vals):
                entry[k] = float(vals.mean())
                entry[f"{k}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        table.append(entry)
    return table, keys


def separation(table, rows: list[dict], metric: str) -> None:
    """Adds, per variant, its metric's 95% interval over seeds, and its difference to the
    best variant paired by seed (encoder/studies/stats.py): the difference's interval, the
    verdict ("not separable" when it holds zero) and the smallest difference these seeds
    could have detected."""
    higher_better = "loss" not in metric
    best = (max if higher_better else min)(table, key=lambda e: e.get(metric, float("nan")))

    def by_seed(variant):
        return {r["seed"]: r[metric] for r in rows if r["variant"] == variant and metric in r}
    for e in table:
        e["interval"] = stats.mean_interval(list(by_seed(e["variant"]).values()))
        if len(table) < 2:  # one variant is compared with nothing: no "best" of one
            e["vs_best"], e["verdict"], e["detectable"] = None, "one variant", float("nan")
            continue
        if e is best:
            e["vs_best"], e["verdict"], e["detectable"] = None, "best", float("nan")
            continue
        c = stats.compare(by_seed(best["variant"]), by_seed(e["variant"]))
        e["vs_best"], e["detectable"] = c.difference, c.detectable
        e["verdict"] = c.verdict(best["variant"], e["variant"])


def _diff_text(iv) -> str:
    if iv is None:
        return "-"
    if not math.isfinite(iv.low):
        return f"{iv.mean:+.4f} (1 seed)"
    return f"{iv.mean:+.4f} [{iv.low:+.4f}, {iv.high:+.4f}]"


def write_results(rows: list[dict], root: str) -> list[dict]:
    table, keys = aggregate(rows)
    metric = primary_metric(rows)
    report.write_dict_csv(os.path.join(root, "runs.csv"), ["variant", "seed", "objective"]
                          + keys + ["checkpoint", "data"] + sorted(
                              {k for r in rows for k in r if k.startswith("protocol/")}), rows)
    extra = [k for k in keys if k.startswith(("eval/", "evals/", "finetune/", "suite/"))
             and k not in ("eval/mlm_loss", "eval/gen_loss", metric)]
    show = list(dict.fromkeys(["final_train_loss"] + ([metric] if metric else [])
                              + extra[:5])) + ["tokens_per_s", "flops", "parameters"] + [
        k for k in keys if k == "tokens" or k.startswith("tokens/")] + (
        ["mixture"] if any(k.startswith("mixture/") for k in keys) else [])
    if metric is None:
        lines, header, cells = [no_common_metric(rows), ""], [], lambda e: []
        csv_extra = []
    else:
        separation(table, rows, metric)
        for e in table:  # the intervals as columns
            iv, d = e["interval"], e["vs_best"]
            e.update({f"{metric}_ci_low": iv.low, f"{metric}_ci_high": iv.high,
                      "diff_to_best": d.mean if d else 0.0,
                      "diff_ci_low": d.low if d else float("nan"),
                      "diff_ci_high": d.high if d else float("nan")})
        csv_extra = [f"{metric}_ci_low", f"{metric}_ci_high", "diff_to_best", "diff_ci_low",
                     "diff_ci_high", "verdict", "detectable"]
        lines = [f"Primary metric: `{metric}`: its mean with a 95% t interval over seeds; "
                 "`vs best`: the difference to the best variant paired by seed, with its 95% "
                 "interval; `verdict`: separable from zero at 95% or not; `detectable`: the "
                 "smallest true difference these seeds would show at 80% power. Each run's "
                 "scored checkpoint (step, sha256) and data hashes: runs.csv.", ""]
        header = ["vs best [95% CI]", "verdict", "detectable"]
        cells = lambda e: [_diff_text(e["vs_best"]), e["verdict"],  # noqa: E731
                           f"{e['detectable']:.4f}" if math.isfinite(e["detectable"]) else "-"]
    report.write_dict_csv(os.path.join(root, "results.csv"), ["variant", "seeds"] + [
        c for k in keys for c in (k, f"{k}_std")] + csv_extra, table)
    short = [f"{r['variant']} seed {r['seed']}: step {r.get('checkpoint_step')} of "
             f"{r['steps']} planned" for r in rows if r.get("checkpoint_step") != r["steps"]]
    if short:  # a run stopped early (a time budget) or a checkpoint that is not its last
        lines = [f"**WARNING: not every row scored its planned final step:** "
                 f"{'; '.join(short)}", ""] + lines
    lines = [line for m in mixed_protocols(rows) for line in (m, "")] + lines
    first = [f"{metric} [95% CI]"] if metric else []
    lines += report.markdown_table(
        ["variant", "seeds", *first, *show, *header],
        [[e["variant"], e["seeds"], *([e["interval"].text(4)] if metric else []),
          *[cell(e, k) for k in show], *cells(e)] for e in table])
    text = "\n".join(lines) + "\n"
    with open(os.path.join(root, "results.md"), "w") as f:
        f.write(text)
    plot(rows, table, metric, root)
    write_curves(rows, root)
    print(text)
    return table


def write_curves(rows: list[dict], root: str) -> None:
    """STUDY/curves.png and curves.md: every held-out and (watched) downstream metric
    against FLOPs, variants overlaid with 95% bands, each variant against the first at
    matched compute (encoder/studies/curves.py)."""
    from encoder.studies import curves as curves_lib
    found: dict = {}
    for r in rows:
        d = os.path.join(root, "runs", r["dir"]) if "dir" in r else None
        if d is None or not r.get("steps"):
            continue
        per_step = r["flops"] / r["steps"]
        tokens = r.get("tokens", 0) / max(r.get("checkpoint_step") or r["steps"], 1)
        points = curves_lib.run_points(d, per_step, tokens,
                                       os.path.join(root, "watch", r["dir"]))
        if points:
            found.setdefault(r["variant"], {})[r["seed"]] = points
    metrics = sorted({k for seeds in found.values() for pts in seeds.values() for p in pts
                      for k in p if k.startswith(("eval/", "evals/", "suite/"))
                      or (k.startswith("probe/") and k.endswith("/best"))})
    if len(found) < 2 or not metrics:
        return
    curves_lib.plot(found, metrics, os.path.join(root, "curves.png"))
    first, *others = list(found)
    text = "\n".join(curves_lib.markdown(found, metrics, first, other) for other in others)
    with open(os.path.join(root, "curves.md"), "w") as f:
        f.write(text)


def cell(entry: dict, key: str) -> str:
    if key == "mixture":
        return mixture_text(entry)
    if key not in entry:
        return ""
    if key in ("flops", "parameters") or key == "tokens" or key.startswith("tokens/"):
        return f"{entry[key]:.3g}"
    if key == "tokens_per_s":
        return f"{entry[key]:,.0f}"
    return report.mean_std(entry[key], entry[key + "_std"])


def plot(rows, table, metric, root) -> None:
    variants = dict.fromkeys(r["variant"] for r in rows)
    report.curves(os.path.join(root, "loss_curves.png"),
                  {v: [r["curve"] for r in rows if r["variant"] == v] for v in variants},
                  "step", "train loss", "Training loss per variant (one line per seed)")
    if metric is None:
        return
    report.bar_chart(os.path.join(root, "final_metric.png"), [e["variant"] for e in table],
                     [e[metric] for e in table], [e[f"{metric}_std"] for e in table],
                     [f"C{i % 10}" for i in range(len(table))], metric,
                     f"{metric} per variant (mean ± std over seeds)", (7, 4.5))


@dataclasses.dataclass(frozen=True)
class Study:
    """What one `encoder ablate` command asks for (its flags, as data)."""
    workdir: str
    config: object                 # the base experiment's ConfigDict
    sweeps: tuple = ()             # "field=v1,v2,..." strings
    zipped: bool = False
    seeds: int = 1
    parallel: int = 1
    equal_flops: bool = False
    finetune: str = ""
    finetune_data: str = ""
    finetune_set: tuple = ()
    suite: str = ""
    suite_args: tuple = ()         # `encoder suite` flags for every suite
    watch: bool = False            # a watcher beside each run: the suite on each checkpoint
    wsd_budgets: tuple = ()
    wsd_decay_fraction: float = 0.2
    wsd_shape: str = "linear"


def check(study: Study) -> None:
    """Everything a study can be refused for, before anything is written."""
    if study.seeds < 1 or study.parallel < 1:
        raise errors.UsageError(f"--seeds and --parallel must be at least 1, got {study.seeds} "
                                f"and {study.parallel}")
    if study.suite and study.suite != "embedded":  # before any run trains, not after
        from encoder.tasks import catalog
        try:
            catalog.discover(study.suite)
        except (FileNotFoundError, ValueError) as e:
            raise errors.UsageError(f"--suite={study.suite}: {e}") from None
    if study.finetune and not study.finetune_data:
        raise errors.UsageError("--finetune needs --finetune_data")
    for name in ("train.jsonl", "dev.jsonl") if study.finetune else ():
        if not os.path.isfile(os.path.join(study.finetune_data, name)):  # before any run
            raise errors.UsageError(f"--finetune_data={study.finetune_data} has no {name}")


def _is_study_folder(folder: str) -> bool:
    """An earlier ablation's folder (from before the marker: its runs/), or one holding only
    the LOCK another ablation took a moment ago (its marker follows at once)."""
    return os.path.isdir(os.path.join(folder, "runs")) or set(os.listdir(folder)) <= {"LOCK"}


def run_study(study: Study, launcher) -> None:
    """Plans, runs (through `launcher`) and compares the study's runs; one command at a time
    on a study folder (its LOCK, as a workdir's: a second is refused naming the first)."""
    from encoder.train.workdir import Lock
    root = os.path.abspath(study.workdir)
    # The study's folder: new, empty or an earlier ablation's (its marker, or its runs/);
    # nothing is written before every check below has passed.
    errors.check_output(root, "ablate", "--workdir", legacy=_is_study_folder)
    check(study)
    sweeps = [parse_sweep(s) for s in study.sweeps]
    check_sweeps(sweeps, study.config)
    if study.equal_flops:
        check_equal_flops(sweeps, study.config)
    planned = plan(study.config, expand(sweeps, study.zipped), study.seeds, study.equal_flops)
    stables = []
    if study.wsd_budgets:  # the stable runs first; the runs compared are their decays
        try:
            stables, planned = wsd_runs(planned, root, study.wsd_budgets,
                                        study.wsd_decay_fraction, study.wsd_shape)
        except ValueError as e:
            raise errors.UsageError(str(e)) from None
    check_protocols(planned, root)
    # Two commands on one study would each start, skip or move aside the other's runs and
    # report them FAILED while they run: the second is refused here, untouched.
    with Lock(root):
        errors.mark_output(root, "ablate")
        _run_planned(study, launcher, root, stables, planned)


def _run_planned(study: Study, launcher, root: str, stables: list, planned: list) -> None:
    print(f"{len(stables) + len(planned)} runs: " + ", ".join(
        r["dir"] for r in stables + planned), flush=True)
    try:
        if stables and not execute(pretraining_runs(stables, root), launcher):
            return
        watchers = watch_runs(planned, root, study.suite, list(study.suite_args)) \
            if study.watch else []
        if watchers:
            print(watch_line(study), flush=True)
        if not execute(with_watchers(pretraining_runs(planned, root), watchers), launcher):
            return  # detached or a dry run: the same command later waits and reports
        if study.finetune and not execute(finetuning_runs(
                planned, root, study.finetune, study.finetune_data, study.finetune_set),
                launcher):
            return
        if study.suite and not execute(suite_runs(planned, root, study.suite,
                                                  list(study.suite_args)), launcher):
            return
    except RuntimeError as e:
        raise SystemExit(f"error: {e}") from None
    write_results([read_run(r, root) for r in planned], root)
