"""Multi-host probing through fio's client/server mode, against real fio servers in network namespaces."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.conftest import assert_one_line_error, ckplan_exe, run_cli
from tests.netns import fio_hosts

pytestmark = pytest.mark.fio


def scratch(path):
    return [p for p in os.listdir(path) if p.startswith(".ckplan-probe-")]


def test_three_hosts_bandwidth_scaling_and_replay(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--params", "1e9", "--gpus", "6", "--gpus-per-node", "2", "--framework", "dcp",
                            "--zero", "3", "--json", check=True).stdout)
    target = tmp_path / "shared"
    target.mkdir()
    server_cwd = tmp_path / "server-cwd"
    server_cwd.mkdir()
    with fio_hosts(3, workdir=server_cwd) as servers:
        hosts = ",".join(addr for addr, _ in servers)
        out = tmp_path / "cluster.json"
        proc = run_cli("probe", str(target), "--hosts", hosts, "--quick", "--writers", "2", "--plan", str(plan),
                       "--scale", "0.01", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout)
    assert p["hosts"] == 3 and p["storage_class"] == "multi-host"
    assert [b["writers"] for b in p["buffered_bandwidth"]] == [1, 2]
    assert [a["hosts"] for a in p["aggregate_bandwidth"]] == [1, 2, 3]
    # the aggregate of all hosts exceeds any one host's share, and one host's figure is a real write rate
    assert p["aggregate_bandwidth"][-1]["bytes_per_s"] >= p["buffered_bandwidth"][-1]["bytes_per_s"]
    assert all(b["bytes_per_s"] > 10e6 for b in p["buffered_bandwidth"] + p["aggregate_bandwidth"])
    assert "straggler" in p["notes"][0] and all(addr in p["notes"][0] for addr, _ in servers)
    r = p["replay"]
    assert r["files"] == json.loads(plan.read_text())["file_count"] and r["seconds"] > 0
    assert scratch(target) == []
    assert os.listdir(server_cwd) == []  # fio's JOBNAME.prerun.txt output files are removed too
    rec = json.loads(run_cli("recommend", "--plan", str(plan), "--storage", str(out), "--json", check=True).stdout)
    assert rec["save_model"]["source"] == "replay"


def test_recommend_uses_the_measured_aggregate(tmp_path):
    from ckplan import catalog
    from ckplan.planning.savetime import aggregate_bandwidth
    from ckplan.profile import BandwidthPoint
    lustre = catalog.storage_classes()["lustre"]
    measured = lustre.model_copy(update={"aggregate_bandwidth": [BandwidthPoint(writers=8, hosts=1, bytes_per_s=10e9),
                                                                 BandwidthPoint(writers=8, hosts=4, bytes_per_s=16e9)]})
    assert aggregate_bandwidth(measured, 12e9, 2) == pytest.approx(12e9)  # interpolated between 1 and 4 hosts
    assert aggregate_bandwidth(measured, 12e9, 8) == pytest.approx(32e9)  # 4 GB/s per host beyond the last point


def test_unreachable_host_is_named_and_others_cleaned(tmp_path):
    with fio_hosts(1) as servers:
        addr = servers[0][0]
        with socket.socket() as s:  # a port on this machine with no server behind it
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        start = time.monotonic()
        proc = run_cli("probe", str(tmp_path), "--hosts", f"{addr},{dead}", "--quick", "--writers", "1")
        assert time.monotonic() - start < 60
    assert_one_line_error(proc, "127.0.0.1", code=3)  # nobody answers there: the environment
    assert scratch(tmp_path) == []


def test_host_dies_mid_run(tmp_path):
    with fio_hosts(2) as servers:
        hosts = ",".join(addr for addr, _ in servers)
        probe = subprocess.Popen(ckplan_exe() + ["probe", str(tmp_path), "--hosts", hosts, "--writers", "2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not scratch(tmp_path):
            assert probe.poll() is None and time.monotonic() < deadline, probe.communicate()
            time.sleep(0.05)
        victim = servers[1][1]
        os.killpg(victim.pid, signal.SIGKILL)
        _, err = probe.communicate(timeout=180)
        time.sleep(0.5)
        left = scratch(tmp_path)
    assert probe.returncode == 4, err  # the server answered, then died: a failed measurement
    assert servers[1][0] in err and len([l for l in err.splitlines() if l.strip()]) == 1
    # the surviving host's scratch directory is gone; the dead host's (if it made one) is all that may remain
    assert all(servers[1][0] in name for name in left), left


def test_agent_prints_its_command_and_warns_off_loopback():
    proc = subprocess.Popen(ckplan_exe() + ["agent", "--bind", "0.0.0.0", "--port", "18799"], stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert "warning" in err and "no authentication" in err
    assert "running: " in err and "--server=ip:0.0.0.0,18799" in err
    loop = subprocess.Popen(ckplan_exe() + ["agent", "--port", "18798"], stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    with socket.create_connection(("127.0.0.1", 18798), timeout=2):
        pass  # a real fio server listens there
    loop.terminate()
    _, err = loop.communicate(timeout=10)
    assert "warning" not in err and "--server=ip:127.0.0.1,18798" in err


@pytest.mark.parametrize("args,fragment", [(["--hosts", "a:b:c:x"], "bad host entry"), (["--hosts", "h1,h1"], "twice"),
                                           (["--hosts-file", "/nonexistent"], "cannot read")])
def test_bad_host_lists(args, fragment):
    assert_one_line_error(run_cli("probe", "/tmp", *args), fragment)


def test_a_host_name_that_does_not_resolve_is_bad_input(tmp_path):
    # .invalid never resolves (RFC 2606); fio's client says so, and ckplan names the flag instead of a dead server
    proc = run_cli("probe", str(tmp_path), "--hosts", "nosuchhost.invalid", "--quick", "--writers", "1")
    assert_one_line_error(proc, "does not resolve", code=2)
    assert "--hosts" in proc.stderr and scratch(tmp_path) == []
