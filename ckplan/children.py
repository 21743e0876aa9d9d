"""Nothing ckplan starts outlives it: fio, fio clients, save and calibration processes.

Ctrl-C, SIGTERM, SIGHUP and SIGQUIT run ckplan's own clean-up (on_stopping_signals: the one place they are
handled), which stops its children; `kill -9` runs nothing, so each
child asks the kernel for SIGKILL when its parent goes (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing
is set). The kernel sends it when the *thread* that started the child exits, so children are started
from ckplan's main thread only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_prctl = None
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def on_stopping_signals(handler: Callable[[int], None]) -> Iterator[None]:
    """Inside, each of STOPPING_SIGNALS calls `handler` with its number, in the main thread; the handlers before
    are back on leaving. A signal ignored when ckplan started stays ignored: `nohup` ignores SIGHUP so that the
    command outlives its terminal, and a shell's `cmd &` ignores SIGINT."""
    previous = {sig: signal.getsignal(sig) for sig in STOPPING_SIGNALS}
    for sig, before in previous.items():
        if before is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: handler(signum))
    try:
        yield
    finally:
        for sig, before in previous.items():
            if before is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, before)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Inside, SIGTERM (a job's end), SIGHUP (the terminal gone) and SIGQUIT (Ctrl-\\) run the same cleanup as
    Ctrl-C: KeyboardInterrupt, which the commands that leave scratch, save processes or fio behind undo, and exit
    130. Only the first signal raises: a second one while that cleanup runs would cut it short and leave the scratch
    behind (the cleanup's own waits are bounded)."""
    received: list[int] = []

    def interrupt(signum: int) -> None:
        if not received:
            received.append(signum)
            raise KeyboardInterrupt

    with on_stopping_signals(interrupt):
        yield


def _load_prctl():
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent exits; the caller is the child."""
    prctl = _load_prctl()
    if not prctl or prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return
    # the parent may have died between our fork and the prctl: then no signal will come, and our
    # parent is already someone else (init or a subreaper)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def become_subreaper() -> bool:
    """Have orphaned descendants reparented to this process instead of init, so that it can still find and
    stop them (fio's job processes outlive a server that dies first, each in a session of its own).
    False where the kernel has no such setting."""
    prctl = _load_prctl()
    return bool(prctl) and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def preexec() -> Callable[[], None]:
    """A Popen preexec_fn: the setting survives exec. prctl is looked up here, in the parent, so the
    forked child only makes the call."""
    _load_prctl()
    parent = os.getpid()
    return lambda: die_with_parent(parent)


def worker_dies_with_parent() -> None:
    """First thing in a multiprocessing worker (spawned, so no preexec_fn to give)."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None:
        die_with_parent(parent.pid)


def exit_reason(code: int) -> str:
    """A child's exit status in words: a negative returncode is the signal that killed it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def collect(
    results,
    procs,
    count: int,
    timeout_s: float,
    on_dead: Callable[[str], Exception],
    check: Callable[[object], None] | None = None,
) -> list:
    """`count` items from a multiprocessing queue, each passed to `check` (which raises for a worker's
    error report); raises `on_dead(why)` as soon as a worker died without reporting, instead of waiting
    out the timeout for items that cannot come."""
    items: list = []
    deadline = time.monotonic() + timeout_s

    def take(timeout: float) -> bool:
        try:
            item = results.get(timeout=timeout)
        except queue.Empty:
            return False
        if check:
            check(item)
        items.append(item)
        return True

    while len(items) < count:
        if take(0.5):
            continue
        dead = [p.exitcode for p in procs if p.exitcode]
        if dead:
            while take(0.5):  # a report it sent just before dying says more than its exit status
                pass
            raise on_dead(f"a worker process {exit_reason(dead[0])}")
        if time.monotonic() > deadline:
            raise on_dead(f"no result within {timeout_s:.0f} s")
    return items


def stop_all(procs, grace_s: float = 5.0) -> None:
    """Terminate, then kill, every worker still alive, and reap them."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=grace_s)
        if p.is_alive():
            p.kill()
            p.join()


def stop_descendants(grace_s: float) -> None:
    """SIGTERM every descendant of this process, SIGKILL those left after `grace_s`, and reap them all."""
    import psutil

    def alive() -> list[psutil.Process]:
        _reap()
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    signalled: set[int] = set()
    while True:
        left = alive()
        if not left:
            return
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        for p in left:
            if sig == signal.SIGKILL or p.pid not in signalled:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(sig)
                signalled.add(p.pid)
        time.sleep(0.05)


def _reap() -> None:
    """Collect the exit status of every child that has ended (orphans reparented to this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
