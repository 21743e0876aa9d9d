"""Nothing ckplan starts outlives it: fio, fio clients, save and calibration processes.

Ctrl-C and SIGTERM run ckplan's own clean-up, which stops its children; `kill -9` runs nothing, so each
child asks the kernel for SIGKILL when its parent goes (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing
is set). The kernel sends it when the *thread* that started the child exits, so children are started
from ckplan's main thread only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
_prctl = None


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
