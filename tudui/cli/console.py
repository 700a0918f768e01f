"""The console of a command: output that never fails it (what cannot be shown is escaped; a reader that goes away
silences the rest), and SIGTERM (``docker stop``, Kaggle, Colab) ends a run as Ctrl-C does."""
import contextlib
import os
import signal
import sys
import threading
import warnings

_pending = []  # signals that raised KeyboardInterrupt during this command


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


class NeverFails:
    """A console stream whose writes cannot fail: once its reader is gone, the rest goes to the null device."""

    def __init__(self, stream):
        self.stream = stream
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")  # a GBK file name, Chinese on an ASCII console

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe (``| head -1``), a full disk, a closed file
            with contextlib.suppress(AttributeError, ValueError, OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())  # so the exit's flush succeeds
        return len(text)

    def flush(self):
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _interrupt(signum, frame):
    _pending.append(signum)
    raise KeyboardInterrupt


def raise_if_interrupted():
    """Raise the KeyboardInterrupt of a signal that something swallowed during this command (a Ctrl-C that
    lands where Python ignores exceptions, as while DataLoader workers start)."""
    if _pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def console():
    """Run a command with never-failing stdout and stderr, and SIGINT and SIGTERM as KeyboardInterrupt."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = NeverFails(sys.stdout), NeverFails(sys.stderr)
    _pending.clear()
    signals = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    before = {s: signal.signal(s, _interrupt) for s in signals}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        sys.stdout, sys.stderr = streams


@contextlib.contextmanager
def quiet():
    """Hold back what a library prints besides our lines: Python warnings (torch, Pillow, even with
    ``PYTHONWARNINGS=error``) and what C/C++ code (libtiff, c10d's retries) writes to the stderr file
    descriptor; what Python code prints to ``sys.stderr`` still shows."""
    with warnings.catch_warnings(), contextlib.ExitStack() as restore:
        warnings.simplefilter("ignore")
        with contextlib.suppress(OSError), open(os.devnull, "wb") as null:  # no stderr: nothing to hold back
            saved = os.dup(2)
            restore.callback(os.close, saved)
            restore.callback(os.dup2, saved, 2)
            if _on_descriptor_2(sys.stderr):  # our lines go on to the real stderr
                ours = restore.enter_context(open(os.dup(saved), "w", encoding=sys.stderr.encoding,
                                                  errors="backslashreplace"))
                restore.enter_context(contextlib.redirect_stderr(ours))
            os.dup2(null.fileno(), 2)
        yield


def _on_descriptor_2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed stream
        return False
