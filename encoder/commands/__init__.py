"""Every command in one place: `python -m encoder COMMAND [flags]` (or `encoder COMMAND`
once installed with `pip install -e .`).

Each command is one module here: its flags, then one call into a job. COMMANDS is the
table `python -m encoder` lists; the public module names of earlier releases (ALIASES)
are one-line shims over `launch(NAME)`, so scripts that type them keep working: each
says its new name in one line on stderr, then runs.
"""
import importlib
import sys

# name -> what it does (the module is encoder/commands/<name>.py)
COMMANDS = {
    "run": "a job from an experiment file: pretrain, finetune, evaluate or embed "
           "(--config=experiments/NAME.py[:arg] --workdir=DIR)",
    "suite": "the downstream suite of one model (or a --baseline) into one folder",
    "ablate": "an ablation study: sweep variants x seeds, compare them",
    "bench": "benchmarks that print JSON lines (step, pipeline, prepare, compile, device)",
    "merge": "average or merge checkpoints into a params folder",
    "data": "which source, shard and record made each row of a pretraining step (--step=N)",
    "prepare": "text -> a prepared corpus (tokenizer, ArrayRecord shards, manifest)",
    "tasks": "write the embedded downstream tasks (from the standard library's docs)",
    "export": "a checkpoint -> a HuggingFace folder (transformers | sentence-transformers | pylate)",
    "import_hf": "a HuggingFace folder -> a params folder of this codebase",
    "mine": "mine hard negatives for contrastive pairs with a model",
    "probe": "per-layer linear probes of a model on task folders",
    "baselines": "no-model baselines (TF-IDF, majority) on one task's train/dev files",
}

# the module names scripts type (python -m NAME) -> the command each runs
ALIASES = {
    "encoder.main": "run", "encoder.suite": "suite", "encoder.ablate": "ablate",
    "encoder.bench": "bench", "encoder.merge": "merge", "encoder.data.prepare": "prepare",
    "encoder.data.stdlib_tasks": "tasks", "encoder.interop.export": "export",
    "encoder.interop.hf_bert": "import_hf", "encoder.retrieval.mine": "mine",
    "encoder.eval.probe": "probe", "encoder.eval.baselines": "baselines",
}


HELP_FLAGS = {"--help", "-?", "--helpshort", "--helpfull", "--helpxml"}


# the jobs `run` starts, as users name them (a command name they reach for first)
JOBS_OF_RUN = ("pretrain", "train", "finetune", "fine-tune", "evaluate", "eval", "embed")


def did_you_mean(name: str) -> str:
    """'did you mean 'prepare'?' (a line of its own) for a command name close to one
    (difflib), or for a job `run` starts; else a blank line."""
    import difflib
    job = difflib.get_close_matches(name.lower(), JOBS_OF_RUN, n=1, cutoff=0.75)
    if job:
        return (f"did you mean 'run'? ({job[0]} is a job of `run`: python -m encoder run "
                "--config=experiments/NAME.py --workdir=DIR)\n\n")
    close = difflib.get_close_matches(name, COMMANDS, n=2, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}?\n\n" if close else "\n"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    return ("usage: python -m encoder COMMAND [flags]   (COMMAND --helpshort: its flags)\n\n"
            "commands:\n" + "\n".join(lines))


def launch(name: str, argv: list[str] | None = None) -> None:
    """Runs command NAME as the program: its module defines its flags on import, then
    absl parses argv (default: this process's arguments) and calls its `main`."""
    from absl import app

    from encoder.commands.one_line import parse_flags
    if name not in COMMANDS:
        raise SystemExit(f"error: unknown command {name!r}\n{did_you_mean(name)}{usage()}")
    argv = list(sys.argv if argv is None else argv)
    argv[1:] = ["--help" if a == "-h" else a for a in argv[1:]]  # absl knows --help, -?
    _say_the_new_name(name)
    # the launchers resubmit sys.argv[1:]; the program name says which command it was
    sys.argv = [f"encoder {name}"] + argv[1:]
    # SIGTERM takes the Ctrl-C path from here on, through the heavy imports and the flag
    # parsing too (a signal a second after the start ended the process silently, exit
    # 143). The command's main handles its own; one that reaches here came before it:
    # nothing was written, so the same command again is right, and 75 is requeued.
    from encoder import errors, tether
    tether.sigterm_interrupts()
    try:
        module = importlib.import_module(f"encoder.commands.{name}")
        _help_names(module)
        app.run(_kernel_named(module.main, name), argv=sys.argv, flags_parser=parse_flags)
    except SystemExit as e:
        if e.code == 1 and HELP_FLAGS & set(argv[1:]):  # absl ends the help it printed with
            raise SystemExit(0) from None                # exit 1; asked for, it is no failure
        raise
    except KeyboardInterrupt:
        tether.interrupt_seen()
        print("interrupted before it started; run the same command again", file=sys.stderr,
              flush=True)
        raise SystemExit(errors.STOPPED_EXIT_CODE) from None


def _say_the_new_name(name: str) -> None:
    """One line on stderr when the program was started by an old module name (a shim of
    ALIASES: `python -m OLD` runs the shim as __main__, with OLD as its spec's name)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name in ALIASES:
        print(f"note: `python -m {spec.name}` is now `python -m encoder {name}` "
              f"(or `encoder {name}`)", file=sys.stderr, flush=True)


def _kernel_named(main, name: str):
    """main, first renaming the process for the kernel `encoder-NAME`: absl names it after
    argv[0] ("encoder NAME"), and a space in /proc/PID/stat's name field hides the process
    from tools that parse that file by words, SLURM's proctrack/linuxproc among them (its
    `scancel --signal` and time-limit signals then never reach the run)."""
    def named_main(argv):
        from absl import command_name
        command_name.set_kernel_process_name(f"encoder-{name}")
        return main(argv)
    return named_main


def _help_names(module) -> None:
    """--helpshort lists the flags of the program's main module (absl keys it by argv[0])
    and --help prints __main__'s docstring: both are the command's."""
    from absl import flags
    by_module = flags.FLAGS.flags_by_module_dict()
    for owner in (module.__name__, "encoder.commands.launcher_flags",
                  *getattr(module, "FLAG_MODULES", ())):
        for flag in by_module.get(owner, ()):
            flags.FLAGS.register_flag_by_module(sys.argv[0], flag)
    sys.modules["__main__"].__doc__ = module.__doc__


def cli() -> None:
    """`python -m encoder COMMAND ...` and the `encoder` console script."""
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        raise SystemExit(0 if args else 2)
    launch(args[0], [sys.argv[0]] + args[1:])
