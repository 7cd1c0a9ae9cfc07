"""encoder/tether.py's SIGTERM-as-Ctrl-C: every command's stop path runs on a SIGTERM, an
interrupt Python dropped (raised inside a callback from C) is sent again, and once a
command is stopping a second SIGTERM does not cut its stop short."""
import os
import signal
import sys
import time
import types

import pytest

from encoder import tether


def _sigterm():
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def installed():
    previous = tether.sigterm_interrupts()
    try:
        yield
    finally:
        tether.interrupt_seen()  # no re-send outlives the test
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is tether._interrupt
                      else previous)
        tether._SEEN.clear()


def _sleep_until_interrupted(seconds: float, first=lambda: None) -> bool:
    """Runs first() (a signal to ourselves lands at once), then waits: interrupted or not."""
    try:
        first()
        t0 = time.time()
        while time.time() - t0 < seconds:
            time.sleep(0.02)
    except KeyboardInterrupt:
        return True
    return False


def test_a_sigterm_interrupts_as_ctrl_c(installed):
    assert _sleep_until_interrupted(5, _sigterm)
    tether.interrupt_seen()


def test_a_dropped_interrupt_is_sent_again_until_seen(installed, monkeypatch):
    monkeypatch.setattr(tether, "REDELIVER_S", 0.2)
    def dropped():  # what Python does to an exception raised in a gc callback: drops it
        try:
            tether._interrupt(signal.SIGTERM, None)
        except KeyboardInterrupt as e:
            import sys
            import types
            sys.unraisablehook(types.SimpleNamespace(exc_value=e))
    assert _sleep_until_interrupted(5, dropped)  # the re-sent signal reaches the main code
    tether.interrupt_seen()
    assert not _sleep_until_interrupted(0.6)  # seen: no further re-send


def test_once_stopping_a_second_sigterm_is_not_raised(installed):
    tether.interrupt_seen()
    assert not _sleep_until_interrupted(0.5, _sigterm)


def test_no_re_send_outlives_the_handler(monkeypatch):
    """A dropped interrupt whose command then put back the handler it found is not sent
    again: with the default handler back, that SIGTERM would end the process silently (it
    ended a test worker a minute after this file's tests, the re-send delay they set)."""
    monkeypatch.setattr(tether, "REDELIVER_S", 0.2)
    got = []
    recorder = lambda signum, frame: got.append(signum)  # noqa: E731
    previous = signal.signal(signal.SIGTERM, recorder)
    try:
        with tether.sigterm_interrupting():
            ours = types.SimpleNamespace(exc_value=KeyboardInterrupt("signal 15"))
            sys.unraisablehook(ours)  # dropped: a re-send is due in 0.2 s
        assert signal.getsignal(signal.SIGTERM) is recorder
        time.sleep(0.6)
        assert got == []
    finally:
        signal.signal(signal.SIGTERM, previous)
        tether._SEEN.clear()


def test_the_dropped_interrupt_is_not_printed_but_other_unraisables_are(installed,
                                                                        monkeypatch):
    import sys
    import types
    seen = []
    monkeypatch.setattr(tether, "_HOOK", [seen.append])  # the hook it replaced
    monkeypatch.setattr(tether, "REDELIVER_S", 60.0)     # the re-send: not in this test
    ours = types.SimpleNamespace(exc_value=KeyboardInterrupt("signal 15"))
    other = types.SimpleNamespace(exc_value=ValueError("a real one"))
    sys.unraisablehook(ours)
    sys.unraisablehook(other)
    assert seen == [other]


def test_an_interrupt_that_was_caught_is_not_sent_again(installed, monkeypatch):
    """Only a dropped interrupt is re-sent: a caught one whose cleanup takes longer than the
    re-send delay (a checkpoint manager closing) is left to finish."""
    monkeypatch.setattr(tether, "REDELIVER_S", 0.2)
    assert _sleep_until_interrupted(5, _sigterm)
    # not yet marked seen (the interrupt is still on its way up through `finally` blocks)
    assert not _sleep_until_interrupted(0.8)


def test_a_command_puts_back_the_handler_it_found():
    from encoder.commands.one_line import one_line_errors
    before = signal.getsignal(signal.SIGTERM)
    assert one_line_errors(lambda argv: 0)([]) == 0
    assert signal.getsignal(signal.SIGTERM) is before
