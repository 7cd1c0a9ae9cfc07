"""How every command fails: the errors a user can act on end in one `error: ...` line on
stderr and exit 1 (the traceback behind --verbosity=1), an absl usage error or a bad flag
the same; Ctrl-C ends in one line and exit 75 (EX_TEMPFAIL: run the same command again
to resume) where the command resumes, else 130. Which errors are the user's:
encoder/errors.py.
"""
import functools
import os
import sys

from encoder import errors, tether


def _verbose() -> bool:
    try:
        from absl import flags
        return flags.FLAGS.is_parsed() and flags.FLAGS["verbosity"].value >= 1
    except Exception:  # flags not defined / not parsed: be quiet
        return False


class _LibraryTracebacks:
    """A logging filter: orbax's background threads log each failure with its traceback
    (five of them for one full disk) before the main thread re-raises it; the command
    reports the failure in its one line, the tracebacks stay behind --verbosity=1."""

    def filter(self, record) -> bool:
        if record.levelno < 40:
            return True
        orbax = f"{os.sep}orbax{os.sep}"
        # asyncio reports orbax's failed write tasks again when they are collected
        return not (orbax in record.pathname or (
            record.name == "asyncio" and orbax in str(record.getMessage())
            + str(record.exc_text or "") + str(record.exc_info or "")))


def _quiet_library_errors() -> None:
    from absl import logging as absl_logging
    absl_logging.get_absl_handler().addFilter(_LibraryTracebacks())


def ctrl_c_interrupts() -> None:
    """Ctrl-C raises KeyboardInterrupt in this command, whatever signal state it inherited
    (a parent that blocked or ignored SIGINT while it started us, as a test runner's worker
    can be): the command's Ctrl-C promise is the trainer's, which sets its own handler."""
    import signal
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread (a command called in-process): leave it
            pass


def one_line_errors(main=None, *, resumable=False, name: str = ""):
    """Decorator for a command's absl main (see the module docstring); resumable: a bool,
    or a function of nothing read at the interrupt (e.g. the config's mode)."""
    if main is None:
        return functools.partial(one_line_errors, resumable=resumable, name=name)

    @functools.wraps(main)
    def wrapped(argv):
        ctrl_c_interrupts()
        if not _verbose():
            _quiet_library_errors()
        with tether.sigterm_interrupting():  # SIGTERM: the Ctrl-C path (75 if resumable)
            return _main(argv)

    def _main(argv):
        from absl import app
        try:
            return main(argv)
        except KeyboardInterrupt:
            tether.interrupt_seen()
            if _verbose():
                raise
            if resumable() if callable(resumable) else resumable:
                print("interrupted; run the same command again to resume", file=sys.stderr,
                      flush=True)
                raise SystemExit(errors.STOPPED_EXIT_CODE) from None
            print("interrupted", file=sys.stderr, flush=True)
            raise SystemExit(errors.INTERRUPTED_EXIT_CODE) from None
        except errors.Stopped as e:
            if _verbose():
                raise
            print(f"{name + ': ' if name else ''}{errors.message(e)}", file=sys.stderr,
                  flush=True)
            raise SystemExit(errors.STOPPED_EXIT_CODE) from None
        except app.UsageError as e:
            if _verbose():
                raise
            raise SystemExit(f"error: {e}") from None
        except Exception as e:  # noqa: BLE001 -- only the user-facing ones are shortened
            missing = ("Configuration is not available" in str(e)
                       and missing_config_file(sys.argv))
            if missing and not _verbose():
                raise SystemExit(f"error: {missing}") from None
            if not errors.is_user_facing(e) or _verbose():
                raise
            prefix = f"{name}: " if name else ""
            raise SystemExit(f"error: {prefix}{errors.message(e)}") from None
    return wrapped


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flags_parser for app.run: a bad flag, flag value or config override (an
    unknown field, a value of the wrong type) in one `error: ...` line, exit 1."""
    from absl import flags
    argv = recipes_from_checkout(argv)
    try:
        rest = flags.FLAGS(argv)
        refuse_empty_paths(flags.FLAGS)
        return rest
    except flags.Error as e:
        missing = missing_config_file(argv)
        if missing:
            raise SystemExit(f"error: {missing}") from None
        text = errors.one_line(str(e))
        ours = "encoder.errors.UsageError: "  # an experiment's own refusal, wrapped by the
        if ours in text:                      # config loader: its words alone
            raise SystemExit(f"error: {text.split(ours, 1)[1]}") from None
        raise SystemExit(f"error: {text} (--helpshort lists the flags)") from None
    except (AttributeError, KeyError, TypeError, ValueError) as e:  # a --config.x override
        if "--verbosity=1" in argv or "-v=1" in argv:
            raise
        found = unknown_override(e)
        if found is not None:
            raise SystemExit(f"error: {found}") from None
        text = e.args[0] if e.args and isinstance(e.args[0], str) else str(e)
        raise SystemExit(f"error: a --config override: {errors.one_line(text)}") from None


# The checkout an editable install (pip install -e .) runs from: its experiments/ are the
# recipes README's commands name as experiments/NAME.py.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = "experiments"


def recipes_from_checkout(argv: list[str]) -> list[str]:
    """--config=experiments/NAME.py[:ARG] run outside the checkout: the checkout's file
    (an editable install), said on stderr; any other --config stays as it is."""
    out = []
    for arg in argv:
        if arg.startswith("--config=") and not arg.startswith("--config=/"):
            spec = arg.split("=", 1)[1]
            path, sep, rest = spec.partition(":")
            there = os.path.join(CHECKOUT, path)
            if (path.split(os.sep)[0] == RECIPES and not os.path.exists(path)
                    and os.path.isfile(there)):
                print(f"--config={path}: none here; reading the recipes of {CHECKOUT} "
                      f"({there})", file=sys.stderr, flush=True)
                arg = f"--config={there}{sep}{rest}"
                if CHECKOUT not in sys.path:  # recipes import each other (experiments.x)
                    sys.path.append(CHECKOUT)
        out.append(arg)
    return out


# Flags that name a folder or file, where an empty value (an unset shell variable in
# --workdir=$W) would otherwise reach the job as "" and end in "No such file or directory".
PATH_FLAGS = ("workdir", "out", "input", "checkpoint", "train", "dev", "workdirs")


def refuse_empty_paths(flag_values) -> None:
    """A required path flag given empty, named with what it wants (its help's words); a
    flag whose empty default means something (data --out: print) is left alone."""
    for name in PATH_FLAGS:
        if name not in flag_values:
            continue
        flag = flag_values[name]
        if flag.present and not flag.value and flag.default is None:
            raise SystemExit(f"error: --{name} is empty: give {flag.help.split(' (')[0]}")


def missing_config_file(argv: list[str]) -> str | None:
    """The line for a --config=FILE[:ARG] naming no file (config_flags' own words are "an
    earlier failure to load ... [Errno 2]"): the flag, and the close names in its folder."""
    import difflib
    import os
    for arg in argv[1:]:
        if not arg.startswith("--config="):
            continue
        path = arg.split("=", 1)[1].split(":", 1)[0]
        if os.path.isfile(path):
            continue
        if os.path.isdir(path):
            there = sorted(f for f in os.listdir(path) if f.endswith(".py")
                           and not f.startswith("_"))
            return (f"--config={path} is a folder: give an experiment file in it "
                    f"({', '.join(os.path.join(path, f) for f in there[:4])}, ...)")
        folder = os.path.dirname(path) or "."
        there = sorted(f for f in os.listdir(folder) if f.endswith(".py")) \
            if os.path.isdir(folder) else []
        close = difflib.get_close_matches(os.path.basename(path), there, n=2, cutoff=0.6)
        hint = (f"did you mean {' or '.join(os.path.join(folder, c) for c in close)}?" if close
                else f"{folder} has {', '.join(there[:12])}" if there
                else f"{folder} is not a folder" + (
                    f" here ({os.getcwd()}); the recipes are the project checkout's "
                    f"{RECIPES}/ (not installed with the package): run from the checkout or "
                    f"give the path to its {RECIPES}/{os.path.basename(path)}"
                    if path.split(os.sep)[0] == RECIPES else ""))
        return f"--config={path}: no such experiment file; {hint}"
    return None


def unknown_override(e: BaseException) -> str | None:
    """The line for a `--NAME.a.b` override naming no field of the config: the full override,
    where its path leaves the config, and the close names there (difflib); None when `e`
    is not that.

    ml_collections raises it from the config flag's parse with the bare key ('x'); the
    flag, its overrides and the loaded config are that frame's locals."""
    tb, frame = e.__traceback__, None
    while tb is not None:
        if {"self", "config", "overrides"} <= tb.tb_frame.f_locals.keys():
            frame = tb.tb_frame
        tb = tb.tb_next
    if frame is None:
        return None
    name = getattr(frame.f_locals["self"], "name", "config")
    for path in frame.f_locals["overrides"] or ():
        found = _leaves_config(frame.f_locals["config"], name, str(path))
        if found:
            return found
    return None


def _leaves_config(node, name: str, path: str) -> str:
    """Why --name.path names no field of the config `node`, or "" when it does."""
    import difflib
    parts, at = path.split("."), name
    for i, key in enumerate(parts):
        keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else None
        if keys is None:
            return (f"--{name}.{path}: {at} is a value ({type(node).__name__}), not a group of "
                    f"fields; it has no field {key!r}")
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
            rest = "".join(f".{p}" for p in parts[i + 1:])
            if close:
                hint = "Did you mean " + " or ".join(f'"{c}" (--{at}.{c}{rest})'
                                                     for c in close) + "?"
            elif keys:
                hint = f"{at} has: {', '.join(sorted(keys))}"
            elif at == "config.evals":
                hint = ("config.evals is empty: declare evaluators with "
                        "experiments/pretrain.py:evals=TASK+TASK, or in the experiment file "
                        "(encoder/jobs/evals.py)")
            else:
                hint = f"{at} is empty"
            return f"--{name}.{path}: {key!r} is not a field of {at}. {hint}"
        node, at = node[key], f"{at}.{key}"
    return ""
