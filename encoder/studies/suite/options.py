"""What a suite is asked to do (SuiteOptions), and the checks on it before anything runs."""
import dataclasses
import json
import os

from encoder.studies.suite import baseline as baseline_lib, presets


@dataclasses.dataclass
class SuiteOptions:
    init_from: str
    workdir: str
    tasks: str = ""                # "" : the embedded default suite
    preset: str = "default"
    seeds: int = 0                 # 0: the preset's
    learning_rates: tuple = ()     # (): the preset's grid at the model's width
    epochs: int = -1               # -1: the preset's (0: by the model's width)
    parallel: int = 1
    probe: bool = False
    probe_only: bool = False       # probes and embedding tasks, no fine-tuning
    random_init: bool = False
    pooling: str = ""              # fine-tuning pooling; "": the preset's
    embedding_pooling: str = "mean"
    max_train: int = -1            # -1: the preset's; 0: all
    max_eval: int = -1
    train_per_class: int = 0       # few-shot regime: k training examples per class and seed
    intermediate: str = "preset"   # preset | on | off
    only: tuple = ()
    finetune_set: tuple = ()       # field=value overrides for every fine-tuning run
    probe_max_train: int = 2000
    env: dict | None = None        # the fine-tuning subprocesses' environment (local)
    launcher: str = "local"        # where the fine-tuning runs execute (studies/launchers/)
    launcher_options: dict | None = None  # the launcher's own options (slurm: partition, ...)
    baseline: str = ""             # a method with no model instead (suite/baseline.py)
    retriever: str = ""            # retrieval tasks: "bm25,dense,colbert,plaid,sparse"
    #                                (frozen.py; "": the model as it was trained)


def check_grid(opts: SuiteOptions) -> None:
    """--seeds and --learning_rates as given, before tasks are built or a model is read
    (the preset's own values are checked by presets.resolve)."""
    from encoder import registry
    registry.lookup(presets.PRESETS, opts.preset, "suite preset")  # before tasks are written
    if opts.seeds < 0:
        raise ValueError(f"--seeds={opts.seeds}: expected N >= 1 seeds per learning rate "
                         "(0: the preset's)")
    bad = [lr for lr in opts.learning_rates if not 0 < lr < float("inf")]
    if bad:
        raise ValueError(f"--learning_rates must be positive numbers, got {bad} in "
                         f"{list(opts.learning_rates)}")


# Options that only mean something for a model: a baseline run refuses them.
MODEL_ONLY = ("init_from", "learning_rates", "epochs", "parallel", "probe", "random_init",
              "pooling", "embedding_pooling", "intermediate", "finetune_set",
              "probe_max_train", "probe_only", "launcher", "launcher_options", "retriever")


def resolve_preset(opts: SuiteOptions, hidden_size: int) -> dict:
    return presets.resolve(opts.preset, hidden_size, {
        "seeds": opts.seeds or None,
        "learning_rates": tuple(opts.learning_rates) or None,
        "epochs": None if opts.epochs < 0 else opts.epochs,
        "max_train": None if opts.max_train < 0 else opts.max_train,
        "max_eval": None if opts.max_eval < 0 else opts.max_eval,
        "pooling": opts.pooling or None})


def intermediate_plan(opts: SuiteOptions, preset: dict, names: list) -> dict:
    """task -> the task whose fine-tuned model it starts from (both must be in the suite)."""
    if opts.intermediate not in ("preset", "on", "off"):
        raise ValueError(f"--intermediate must be preset, on or off, got {opts.intermediate!r}")
    table = {"preset": preset["intermediate"], "off": {},
             "on": preset["intermediate"] or presets.GLUE_INTERMEDIATE}[opts.intermediate]
    return {t: start for t, start in table.items() if t in names and start in names}


def check_baseline_options(opts: SuiteOptions) -> None:
    """A baseline scores no model: a model's option beside it is an error, not ignored."""
    baseline_lib.check(opts.baseline)
    if opts.init_from:
        raise ValueError(f"--baseline={opts.baseline} scores no model, so --init_from="
                         f"{opts.init_from} has no meaning beside it: run the model's suite "
                         "and the baseline into two workdirs and put their suite.csv rows "
                         "side by side")
    default = SuiteOptions(init_from="", workdir="")
    given = [k for k in MODEL_ONLY if getattr(opts, k) != getattr(default, k)]
    if given:
        raise ValueError(f"--baseline={opts.baseline} scores no model; these options only "
                         f"apply to a model's suite: {', '.join('--' + k for k in given)}")


def refuse_to_replace_finetuned_report(root: str) -> None:
    """--probe_only writes suite.json without fine-tuned tasks: never over a report with them
    (ablate's suite columns would silently become an embedding-only average)."""
    saved = os.path.join(root, "suite.json")
    if not os.path.exists(saved):
        return
    with open(saved) as f:
        header = json.load(f).get("header", {})
    if header.get("fine-tuning") != "none (--probe_only)":
        raise ValueError(f"{root} holds a suite report with fine-tuned tasks; --probe_only "
                         "would replace it with an embedding-only one: run the full suite "
                         "again there (finished runs are skipped) with --probe, or choose "
                         "another --workdir")
