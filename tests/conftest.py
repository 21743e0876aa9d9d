import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def ckplan_exe() -> list[str]:
    """The installed console script; tests drive it as a user would."""
    exe = shutil.which("ckplan", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    assert exe, "the ckplan console script is not installed (pip install -e '.[dev]')"
    return [exe]


def run_cli(
    *args: str, check: bool = False, timeout: float = 300, env: dict | None = None, cwd=None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(
        ckplan_exe() + list(args), capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"ckplan {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def run_json(*args: str, **kw) -> dict:
    return json.loads(run_cli(*args, "--json", check=True, **kw).stdout)


def assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str = "", code: int = 2) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fragment.lower() in lines[0].lower(), lines[0]


@pytest.fixture
def cli():
    return run_cli


def sigint_default() -> None:
    """preexec_fn for a ckplan the test will Ctrl-C: SIGINT back to its default action. A suite started in the
    background by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler, so the child would never see the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_replay_or_why_not(rec: dict, total_bytes: int, replay: dict) -> None:
    """A recommendation from a profile that replayed every node of the plan: the replay is the save, unless it ran
    on many hosts and its bytes would cross faster than the probe's own aggregate allows (its fio runtimes left a
    cost untimed); then the model, saying why."""
    from ckplan.planning.savetime import REPLAY_OVER_AGGREGATE

    model = rec["save_model"]
    implied = total_bytes / replay["full_scale_seconds"]
    consistent = replay["nodes"] == 1 or implied <= REPLAY_OVER_AGGREGATE * model["aggregate_bandwidth_bytes_per_s"]
    assert model["source"] == ("replay" if consistent else "model"), (implied, model)
    assert consistent or "left a cost untimed" in model["notes"][-1]
