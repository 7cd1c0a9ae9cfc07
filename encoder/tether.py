"""A child process tied to its parent's life: it ends when the process that started it dies,
however that dies (SIGKILL, an OOM kill, a scheduler's time limit), instead of training
on unsupervised into a folder nobody reads.

    env = tether.child_env(env)   # the parent, for the child it starts (subprocess env=)
    tether.hold()                 # the child, first thing in its main

The parent's pid travels in the child's environment (ENCODER_TETHER_PID). `hold()`, on
Linux, asks the kernel for SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG, through
ctypes, in the child itself: nothing runs between fork and exec, so it is safe in a
parent with threads, where subprocess's preexec_fn is not), then checks that its parent
is still that pid: a parent that died before the call gets the same SIGTERM at once.
SIGTERM is the clean stop: a job checkpoints and exits 75 (its workdir reads stopped,
and a resumed study resumes it); a suite stops its own children first.

Where prctl is missing (macOS, the BSDs) a daemon thread polls os.getppid() every
second and sends the same SIGTERM when the parent has changed (the child was reparented).

The kernel's signal fires when the parent *thread* that started the child ends, not only
the parent process: the study launchers start their children from the thread that waits
for them (encoder/studies/launchers/local.py, the study's main thread), which outlives
them. The variable is removed from the child's environment once read, so what the child
starts in turn is tied to it only through child_env() (as `encoder suite`'s jobs are).
"""
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

ENV = "ENCODER_TETHER_PID"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_SECONDS = 1.0


def child_env(env: dict | None = None) -> dict:
    """A copy of `env` (default: this process's) that ties the child to this process."""
    return {**(os.environ if env is None else env), ENV: str(os.getpid())}


def hold(use_prctl: bool | None = None) -> str:
    """Ties this process to the parent named in ENCODER_TETHER_PID, if any; returns how:
    "prctl", "poll" or "" (not started tethered). use_prctl=False forces the polling
    thread (what macOS gets; tests use it on Linux)."""
    value = os.environ.pop(ENV, "")
    if not value:
        return ""
    parent = int(value)
    if use_prctl is None:
        use_prctl = sys.platform.startswith("linux")
    if use_prctl and _parent_death_signal(signal.SIGTERM):
        if os.getppid() != parent:  # died before we asked: the kernel will not say it again
            _stop()
        return "prctl"
    threading.Thread(target=_watch, args=(parent,), name="tether", daemon=True).start()
    return "poll"


def _parent_death_signal(signum: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum); False where the call is not there."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return False
    if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    return True


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    _stop()


def _stop() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


# ------------------------------------------------------------------ SIGTERM as Ctrl-C

REDELIVER_S = 1.0
_SEEN = threading.Event()  # a command caught the interrupt a SIGTERM raised
_HOOK: list = []           # the unraisable hook ours replaced (one, the latest)
_TIMERS: list = []         # re-sends not yet made


def sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does, so a command's
    stop path (its `finally`, its children stopped and waited for, its one-line exit 75)
    runs instead of Python's instant default exit. Returns the previous handler (None off
    the main thread, where signals stay with the caller): restore it when done.

    An exception raised while Python runs a callback from C (JAX's garbage-collection
    hook) is dropped, through sys.unraisablehook ("Exception ignored in ..."): ours is
    recognised there, kept quiet, and the signal sent again a second later, until the
    command has caught it (interrupt_seen()). Once caught, further SIGTERMs are noted and
    not raised: a stop under way (children writing their last checkpoints) is not cut
    short by a second one (`timeout`, a scheduler and a user can each send one)."""
    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:
        return None
    _SEEN.clear()  # a new stretch of work: the next SIGTERM interrupts it
    if sys.unraisablehook is not _dropped:
        _HOOK[:] = [sys.unraisablehook]
        sys.unraisablehook = _dropped
    return previous


@contextlib.contextmanager
def sigterm_interrupting():
    """sigterm_interrupts() for a block: the handler found is put back after it."""
    previous = sigterm_interrupts()
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    if not _SEEN.is_set():
        raise KeyboardInterrupt(f"signal {signum}")


def _dropped(unraisable) -> None:
    """Our interrupt, dropped by Python: sent again (quietly); anything else is shown by
    the hook ours replaced."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and \
            str(unraisable.exc_value).startswith("signal "):
        timer = threading.Timer(REDELIVER_S, _redeliver)
        timer.daemon = True
        _TIMERS.append(timer)
        timer.start()
        return
    (_HOOK[0] if _HOOK else sys.__unraisablehook__)(unraisable)


def _redeliver() -> None:
    # Only while our handler still holds SIGTERM: once a command has put back the handler it
    # found (the default one ends the process, silently) a re-send would kill what follows.
    if not _SEEN.is_set() and signal.getsignal(signal.SIGTERM) is _interrupt:
        os.kill(os.getpid(), signal.SIGTERM)


def interrupt_seen() -> None:
    """The command caught the interrupt and is stopping: no more re-sends or raises."""
    _SEEN.set()
    while _TIMERS:
        _TIMERS.pop().cancel()
