"""Multi-host probing through fio's client/server mode, against real fio servers in network namespaces."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from scripts._harness import free_port
from tests.conftest import assert_one_line_error, assert_replay_or_why_not, ckplan_exe, run_cli, run_json
from tests.netns import fio_hosts, kill_servers, server_processes

pytestmark = pytest.mark.fio


def scratch(path):
    return [p for p in os.listdir(path) if p.startswith(".ckplan-probe-")]


def test_agent_wait_for_2000_unreachable_hosts_is_one_bound_in_total(tmp_path):
    """2,000 loopback addresses on a port nobody listens on, with --agent-wait 2s: every host is tried at once
    against the one deadline, so the probe ends within it (174 s when each host had a fio client of its own)."""
    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        closed = probe_port.getsockname()[1]  # free once closed: every 127.x address refuses it
    target = tmp_path / "shared"
    target.mkdir()
    start = time.monotonic()
    proc = run_cli(
        "probe", str(target), "--hosts", f"127.0.[1-8].[1-250]:{closed}", "--agent-wait", "2s", "--quick",
        "--no-calibrate", timeout=60,
    )  # fmt: skip
    took = time.monotonic() - start
    assert_one_line_error(proc, "no agent ran fio's handshake", code=3)
    assert "127.0.1.1:" in proc.stderr and "and 1,995 more within 2 s" in proc.stderr
    assert took < 10, took
    assert scratch(target) == []


def test_agent_wait_finds_an_agent_that_starts_late_among_hosts_that_never_do():
    """An agent that starts a second into the wait is found by its handshake; the ones that never start are named."""
    from ckplan.errors import EnvironmentProblem
    from ckplan.probe.backends.hosts import wait_for_agents
    from ckplan.probe.hostlist import Host

    port = free_port()
    late = Host("127.0.0.1", port)
    never = [Host(f"127.0.0.{i}", port) for i in range(2, 40)]
    starter = threading.Timer(1.0, lambda: servers.append(subprocess.Popen(["fio", f"--server=ip:127.0.0.1,{port}"])))
    servers: list[subprocess.Popen] = []
    starter.start()
    try:
        wait_for_agents([late], 10)
        with pytest.raises(EnvironmentProblem, match=r"127\.0\.0\.2:\d+, .* and 33 more within 4 s"):
            wait_for_agents([late, *never], 4)
    finally:
        starter.join()
        for server in servers:
            server.terminate()
            server.wait()


def test_three_hosts_bandwidth_scaling_and_replay(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli(
            "size",
            "--params",
            "1e9",
            "--gpus",
            "6",
            "--gpus-per-node",
            "2",
            "--framework",
            "dcp",
            "--zero",
            "3",
            "--json",
            check=True,
        ).stdout
    )
    target = tmp_path / "shared"
    target.mkdir()
    server_cwd = tmp_path / "server-cwd"
    server_cwd.mkdir()
    with fio_hosts(3, workdir=server_cwd) as servers:
        hosts = ",".join(addr for addr, _ in servers)
        out = tmp_path / "cluster.json"
        proc = run_cli(
            "probe",
            str(target),
            "--hosts",
            hosts,
            "--quick",
            "--writers",
            "2",
            "--plan",
            str(plan),
            "--scale",
            "0.01",
            "--out",
            str(out),
            "--json",
        )
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout)
    assert p["hosts"] == 3 and p["storage_class"] == "multi-host"
    assert [b["writers"] for b in p["buffered_bandwidth"]] == [1, 2]
    assert [a["hosts"] for a in p["aggregate_bandwidth"]] == [1, 2, 3]
    # the aggregate of all hosts exceeds any one host's share, and one host's figure is a real write rate
    assert p["aggregate_bandwidth"][-1]["bytes_per_s"] >= p["buffered_bandwidth"][-1]["bytes_per_s"]
    assert all(b["bytes_per_s"] > 10e6 for b in p["buffered_bandwidth"] + p["aggregate_bandwidth"])
    # the read phase on every host at once: a point per reader count, and the aggregate of 1, 2 and 3 hosts reading
    assert [b["writers"] for b in p["read_bandwidth"]] == [1, 2]
    assert [a["hosts"] for a in p["aggregate_read_bandwidth"]] == [1, 2, 3]
    assert all(b["bytes_per_s"] > 10e6 for b in p["read_bandwidth"] + p["aggregate_read_bandwidth"])
    (straggler,) = [n for n in p["notes"] if "straggler" in n]
    assert all(addr in straggler for addr, _ in servers)
    r = p["replay"]
    assert r["files"] == json.loads(plan.read_text())["file_count"] and r["seconds"] > 0
    assert r["nodes"] == 3  # one node per host: the plan's 3 nodes, so the replay covers the whole save
    # exactly the plan's files at 1%: fio's io_bytes summed over hosts, against the manifest's sizes by hand
    expected = sum(max(1, int(f["bytes"] * 0.01)) for f in json.loads(plan.read_text())["manifest"])
    assert abs(r["bytes"] - expected) <= 0.001 * expected, (r["bytes"], expected)
    assert r["method"] == "raw bytes" and r["serialize_seconds"] > 0  # the hosts' raw writes carry the serialiser
    assert scratch(target) == []
    assert os.listdir(server_cwd) == []  # fio's JOBNAME.prerun.txt output files are removed too
    rec = json.loads(run_cli("recommend", "--plan", str(plan), "--storage", str(out), "--json", check=True).stdout)
    assert_replay_or_why_not(rec, json.loads(plan.read_text())["total_bytes"], r)


def test_recommend_uses_the_measured_aggregate(tmp_path):
    from ckplan import catalog
    from ckplan.planning.scaling import aggregate_estimate
    from ckplan.profile import BandwidthPoint

    lustre = catalog.storage_classes()["lustre"]
    measured = lustre.model_copy(
        update={
            "aggregate_bandwidth": [
                BandwidthPoint(writers=8, hosts=1, bytes_per_s=10e9),
                BandwidthPoint(writers=8, hosts=4, bytes_per_s=16e9),
            ]
        }
    )
    # interpolated between 1 and 4 hosts: 10 + (2 − 1)/(4 − 1) × 6 = 12 GB/s
    assert aggregate_estimate(measured, 12e9, 2).bytes_per_s == pytest.approx(12e9)
    # beyond the last point: 12 GB/s per node × 8, at most the lustre class's 400 GB/s limit
    assert aggregate_estimate(measured, 12e9, 8).bytes_per_s == pytest.approx(96e9)
    unlimited = measured.model_copy(update={"aggregate_limit_bytes_per_s": None})
    assert aggregate_estimate(unlimited, 12e9, 8).bytes_per_s == pytest.approx(16e9)  # two points: the best, held flat


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
        probe = subprocess.Popen(
            ckplan_exe() + ["probe", str(tmp_path), "--hosts", hosts, "--writers", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
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
    assert servers[1][0] in err and len([ln for ln in err.splitlines() if ln.strip()]) == 1
    # the surviving host's scratch directory is gone; the dead host's (if it made one) is all that may remain
    assert all(servers[1][0] in name for name in left), left


def test_agent_prints_its_command_and_warns_off_loopback():
    proc = subprocess.Popen(
        ckplan_exe() + ["agent", "--bind", "0.0.0.0", "--port", "18799"], stderr=subprocess.PIPE, text=True
    )
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


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--hosts", "a:b:c:x"], "bad host entry"),
        (["--hosts", "h1,h1"], "twice"),
        (["--hosts-file", "/nonexistent"], "cannot read"),
    ],
)
def test_bad_host_lists(args, fragment):
    assert_one_line_error(run_cli("probe", "/tmp", *args), fragment)


def test_a_host_name_that_does_not_resolve_is_bad_input(tmp_path):
    # .invalid never resolves (RFC 2606); fio's client says so, and ckplan names the flag instead of a dead server
    proc = run_cli("probe", str(tmp_path), "--hosts", "nosuchhost.invalid", "--quick", "--writers", "1")
    assert_one_line_error(proc, "does not resolve", code=2)
    assert "--hosts" in proc.stderr and scratch(tmp_path) == []


# --- ckplan agent under srun: options from the environment, idle timeout, SIGTERM --------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent(args, cwd, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        ckplan_exe() + ["agent", *args], stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **(env or {})}
    )


def _wait_listening(addr: str, port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            assert time.monotonic() < deadline, f"no fio server on {addr}:{port}"
            time.sleep(0.1)


def _stop(proc: subprocess.Popen, addr: str, port: int, cwd) -> None:
    """Clean up after a failed test: the agent, then whatever fio it left."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    kill_servers([addr], port, os.path.realpath(cwd))


def test_agent_takes_its_address_and_port_from_the_environment(tmp_path):
    port, other = _free_port(), _free_port()
    env = {"CKPLAN_AGENT_BIND": "127.0.0.7", "CKPLAN_AGENT_PORT": str(port)}
    agent = _agent([], tmp_path, env)
    try:
        _wait_listening("127.0.0.7", port, agent)
        with pytest.raises(OSError):  # the variable's address and nothing else
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        agent.terminate()
        _, err = agent.communicate(timeout=15)
    finally:
        _stop(agent, "127.0.0.7", port, tmp_path)
    assert agent.returncode == 0 and f"--server=ip:127.0.0.7,{port}" in err and "warning" not in err
    # an option wins over its variable
    agent = _agent(["--bind", "127.0.0.8", "--port", str(other)], tmp_path, env)
    try:
        _wait_listening("127.0.0.8", other, agent)
        agent.terminate()
        _, err = agent.communicate(timeout=15)
    finally:
        _stop(agent, "127.0.0.8", other, tmp_path)
    assert f"--server=ip:127.0.0.8,{other}" in err


@pytest.mark.parametrize(
    "args,env,fragment,code",
    [
        ([], {"CKPLAN_AGENT_PORT": "99999"}, "CKPLAN_AGENT_PORT must be a port number 1-65535, got '99999'", 2),
        (["--port", "0"], {"CKPLAN_AGENT_PORT": "8765"}, "--port must be a port number", 2),
        ([], {"CKPLAN_AGENT_IDLE_TIMEOUT": "soon"}, "CKPLAN_AGENT_IDLE_TIMEOUT", 2),
        (["--idle-timeout", "0"], {}, "--idle-timeout must be > 0", 2),
        (["--bind", " "], {}, "--bind is empty", 2),
        (["--bind", "slurm"], {"SLURMD_NODENAME": ""}, "SLURMD_NODENAME is not set", 2),
        (
            [],
            {"CKPLAN_AGENT_BIND": "slurm", "SLURMD_NODENAME": "localhost"},
            "resolves to 127.0.0.1, a loopback address",
            3,
        ),
        (["--bind", "nosuch.invalid"], {}, "'nosuch.invalid' does not resolve", 2),
    ],
)
def test_agent_settings_refused_in_one_line(args, env, fragment, code):
    assert_one_line_error(run_cli("agent", *args, env=env), fragment, code=code)


def test_agent_idle_timeout_counts_from_the_last_client(tmp_path):
    port = _free_port()
    job = tmp_path / "job.fio"
    job.write_text("[busy]\nioengine=null\nsize=1G\ntime_based=1\nruntime=7\n")
    agent = _agent(["--port", str(port), "--idle-timeout", "3s"], tmp_path)
    try:
        _wait_listening("127.0.0.1", port, agent)
        start = time.monotonic()
        client = subprocess.run(
            ["fio", f"--client=ip:127.0.0.1,{port}", str(job)], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        ended = time.monotonic()
        # the job held its connection for 7 s, over twice the idle timeout, and the agent served it to the end
        assert client.returncode == 0 and ended - start >= 7, client.stdout + client.stderr
        assert agent.poll() is None
        _, err = agent.communicate(timeout=20)
        stopped = time.monotonic()
    finally:
        _stop(agent, "127.0.0.1", port, tmp_path)
    assert agent.returncode == 0 and "no client connected for 3 s (--idle-timeout): stopping" in err
    assert 2.0 <= stopped - ended <= 9, stopped - ended  # idle counted from the client's last connection
    assert server_processes(["127.0.0.1"], port, os.path.realpath(tmp_path)) == []


@pytest.mark.parametrize("everyone", [False, True], ids=["agent", "every-process-as-slurm-does"])
def test_sigterm_ends_the_agent_and_every_fio_process(tmp_path, everyone):
    port = _free_port()
    cwd = os.path.realpath(tmp_path)
    job = tmp_path / "job.fio"
    job.write_text("[busy]\nioengine=null\nsize=1G\ntime_based=1\nruntime=120\nnumjobs=2\n")
    agent = _agent(["--port", str(port)], tmp_path)
    client = None
    try:
        _wait_listening("127.0.0.1", port, agent)
        client = subprocess.Popen(
            ["fio", f"--client=ip:127.0.0.1,{port}", str(job)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 30
        # the server, its process per connection, that one's backend and the two jobs
        while len(fio_pids := server_processes(["127.0.0.1"], port, cwd)) < 5:
            assert time.monotonic() < deadline, fio_pids
            time.sleep(0.1)
        # fio's jobs left the agent's session: killing its process group would miss them
        assert any(os.getsid(pid) != os.getsid(agent.pid) for pid in fio_pids)
        for pid in [agent.pid] + (fio_pids if everyone else []):
            os.kill(pid, signal.SIGTERM)
        _, err = agent.communicate(timeout=20)
        left = server_processes(["127.0.0.1"], port, cwd)
    finally:
        _stop(agent, "127.0.0.1", port, tmp_path)
        if client:
            client.kill()
            client.wait()
    assert agent.returncode == 0 and "stopping on SIGTERM" in err, err
    assert left == []  # nothing of fio outlives the agent, not even a job in a session of its own


def test_a_dead_fio_server_leaves_no_orphaned_jobs(tmp_path):
    """fio's jobs outlive a server killed under them; the agent (a child subreaper) inherits and ends them."""
    port = _free_port()
    cwd = os.path.realpath(tmp_path)
    job = tmp_path / "job.fio"
    job.write_text("[busy]\nioengine=null\nsize=1G\ntime_based=1\nruntime=120\nnumjobs=2\n")
    agent = _agent(["--port", str(port)], tmp_path)
    client = None
    try:
        _wait_listening("127.0.0.1", port, agent)
        client = subprocess.Popen(
            ["fio", f"--client=ip:127.0.0.1,{port}", str(job)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
        )
        deadline = time.monotonic() + 30
        while len(server_processes(["127.0.0.1"], port, cwd)) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        import psutil

        server = next(p.pid for p in psutil.Process(agent.pid).children() if p.name() == "fio")
        os.kill(server, signal.SIGKILL)
        _, err = agent.communicate(timeout=20)
        left = server_processes(["127.0.0.1"], port, cwd)
    finally:
        _stop(agent, "127.0.0.1", port, tmp_path)
        if client:
            client.kill()
            client.wait()
    assert agent.returncode == 1 and "fio's server killed by SIGKILL" in err, err
    assert left == []


# --- the sbatch script of docs/slurm.md, run with a stand-in srun --------------------------------------------------

DOCS_SLURM = Path(__file__).parent.parent / "docs" / "slurm.md"

FAKE_SRUN = '''#!{python}
"""A stand-in for srun: one task per node of $SHIM_NODES ("name=netns ..."), each in that node's network namespace
with SLURMD_NODENAME, SLURM_PROCID and SLURM_NODEID as slurmd sets them; SIGTERM and SIGINT go on to every task,
as srun passes them on."""
import os, signal, subprocess, sys

args = sys.argv[1:]
log = open(os.environ["SHIM_LOG"], "a", buffering=1)
log.write("srun " + " ".join(args) + "\\n")
while args and args[0].startswith("-"):
    args.pop(0)
tasks = []
for i, node in enumerate(os.environ["SHIM_NODES"].split()):
    name, ns = node.split("=")
    env = dict(os.environ, SLURMD_NODENAME=name, SLURM_PROCID=str(i), SLURM_NODEID=str(i), SLURM_LOCALID="0")
    tasks.append(subprocess.Popen(["ip", "netns", "exec", ns] + args, env=env))
    log.write(f"task {{tasks[-1].pid}}\\n")
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, f: [t.send_signal(s) for t in tasks if t.poll() is None])
codes = [t.wait() for t in tasks]
sys.exit(next((c for c in codes if c), 0))
'''


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sbatch_script() -> str:
    """The one complete sbatch script in docs/slurm.md, as the reader copies it."""
    import re

    blocks = [b for b in re.findall(r"```bash\n(.*?)```", DOCS_SLURM.read_text(), re.S) if b.startswith("#!/bin/bash")]
    assert len(blocks) == 1 and "#SBATCH --ntasks-per-node=1" in blocks[0], blocks
    return blocks[0]


def test_the_sbatch_script_in_the_docs_probes_every_node(tmp_path):
    import re
    import shutil
    import sys

    from tests.netns import namespaces

    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("fio") is None:
        pytest.skip("needs root, unshare and fio: network namespaces and a private /etc/hosts")
    script = tmp_path / "ckplan-probe.sbatch"
    script.write_text(sbatch_script())
    bin_dir, submit, target = tmp_path / "bin", tmp_path / "submit", tmp_path / "shared"
    for d in (bin_dir, submit):
        d.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable))
    srun.chmod(0o755)
    log = tmp_path / "srun.log"
    with namespaces(3) as nodes:
        if nodes[0][0] is None:
            pytest.skip("network namespaces unavailable")
        names = [f"node{n:02d}" for n in range(1, 4)]
        addrs = [addr for _, addr in nodes]
        hosts = tmp_path / "hosts"
        hosts.write_text(
            "127.0.0.1 localhost\n::1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(addrs, names, strict=True))
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env.update(
            PATH=os.pathsep.join([str(bin_dir), os.path.dirname(ckplan_exe()[0]), env["PATH"]]),
            NO_COLOR="1",
            COLUMNS="200",
            SLURM_JOB_NODELIST="node[01-03]",
            SLURM_NODELIST="node[01-03]",
            SLURM_JOB_ID="4242",
            SLURM_JOB_NUM_NODES="3",
            SLURM_CPUS_ON_NODE="2",
            SLURM_SUBMIT_DIR=str(submit),
            USER="ckplan-test",
            TARGET=str(target),
            SHIM_LOG=str(log),
            SHIM_NODES=" ".join(f"{n}={ns}" for n, (ns, _) in zip(names, nodes, strict=True)),
        )
        # sbatch would run the script on the first node; here it runs beside the nodes, which it reaches by their veths
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$1" /etc/hosts && exec bash "$2" --quick --writers 1',
            "sh",
            str(hosts),
            str(script),
        ]
        try:
            proc = subprocess.run(cmd, cwd=submit, env=env, capture_output=True, text=True, timeout=500)
        finally:
            tasks = [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("task ")]
            alive = [pid for pid in tasks if _running(pid)]
            left = server_processes(addrs, 8765, os.path.realpath(submit))
            for pid in alive:
                os.kill(pid, signal.SIGKILL)
            kill_servers(addrs, 8765, os.path.realpath(submit))
    err = proc.stderr
    assert proc.returncode == 0, err
    assert "ckplan: --hosts slurm: 3 nodes in $SLURM_JOB_NODELIST (node[01-03]): node01, node02, node03" in err
    assert log.read_text().startswith("srun --ntasks-per-node=1 ")
    # each agent bound its own node's address, found from its Slurm name inside its own namespace, and said so
    assert sorted(re.findall(r"--server=ip:(10\.231\.\d\.2),8765", err)) == sorted(addrs)
    assert err.count("ckplan: warning: fio's server protocol has no authentication") == 3
    assert err.count("ckplan agent: stopping on SIGTERM") == 3
    profile = json.loads((submit / "ckplan-profile-4242.json").read_text())
    assert profile["hosts"] == 3 and [a["hosts"] for a in profile["aggregate_bandwidth"]] == [1, 2, 3]
    assert all(name in profile["notes"][0] for name in names)
    assert all(p["bytes_per_s"] > 10e6 for p in profile["aggregate_bandwidth"])
    # nothing is left: agents, fio servers, their jobs, scratch directories, fio's prerun files
    assert alive == [] and left == []
    assert scratch(target) == [] and os.listdir(submit) == ["ckplan-profile-4242.json"]


def test_a_second_agent_on_a_taken_port_is_refused(tmp_path):
    """fio's server binds with SO_REUSEPORT: without the check, a second agent would share the port and take half
    of the probes' connections."""
    port = _free_port()
    first = _agent(["--port", str(port)], tmp_path)
    try:
        _wait_listening("127.0.0.1", port, first)
        for bind in ("127.0.0.1", "0.0.0.0"):
            proc = run_cli("agent", "--bind", bind, "--port", str(port), timeout=30)
            assert_one_line_error(proc, f"port {port} is taken: a process listens on 127.0.0.1:{port} already", code=3)
        assert first.poll() is None
    finally:
        first.terminate()
        first.communicate(timeout=15)
        _stop(first, "127.0.0.1", port, tmp_path)


# --- a running multi-host probe's scratch directories are marked as its own -------------------------------------


def test_a_running_multi_host_probes_scratch_is_kept_by_clean_and_seen_by_other_probes(tmp_path):
    import threading

    from ckplan import scratch
    from ckplan.probe import fio, hostlist
    from ckplan.probe.backends.local import LocalSession
    from ckplan.probe.engine import Silent

    port = _free_port()
    server_cwd, path = tmp_path / "server", tmp_path / "target"
    server_cwd.mkdir()
    path.mkdir()
    agent = _agent(["--port", str(port)], server_cwd)
    try:
        _wait_listening("127.0.0.1", port, agent)
        host = hostlist.Host("127.0.0.1", port)
        run = hosts_session(path, [host], f"{socket.gethostname()}-{os.getpid()}-abc123")
        hold = fio.FioJob("hold", {"stonewall": 1, "ioengine": "null", "size": "1G", "time_based": 1, "runtime": 4})
        done: list = []
        driver = threading.Thread(target=lambda: done.append(run.clients({host: [hold]}, "a test", None)))
        driver.start()
        marker = Path(run.scratch(host)) / scratch.MARKER
        deadline = time.monotonic() + 20
        while not (marker.exists() and marker.read_text()):
            assert driver.is_alive() and time.monotonic() < deadline, "the marker never appeared"
            time.sleep(0.05)
        [found] = scratch.scratch_dirs(path)
        assert (found.host, found.pid, found.live) == (socket.gethostname(), os.getpid(), True)
        cleaned = run_json("clean", str(path))  # no --force: the running probe's directory stays
        assert cleaned["removed"] == [] and found.path.exists()
        (path / "mine").mkdir()
        others = LocalSession(path / "mine", Silent(), None).others()  # a filesystem probe of the same target names it
        (path / "mine").rmdir()
        assert others == [f"{found.path} (host {socket.gethostname()}, pid {os.getpid()})"]
        driver.join(60)
        assert done and not driver.is_alive()
    finally:
        _stop(agent, "127.0.0.1", port, server_cwd)
    assert os.listdir(path) == [] and os.listdir(server_cwd) == []  # the marker's prerun output file too


def test_clean_keeps_another_hosts_multi_host_scratch_unless_forced(tmp_path):
    from ckplan.probe import hostlist

    # laid out as a run driven from node07 lays it out: the fio server wrote the driver's marker
    run = hosts_session(tmp_path, [hostlist.Host("10.0.0.2")], "node07-4242-abc123")
    scratch_dir = Path(run.scratch(run.all[0]))
    scratch_dir.mkdir()
    (scratch_dir / "ckplan-probe.json").write_text(json.dumps({"host": "node07", "pid": 4242, "started": 1.0}))
    (scratch_dir / "bw.0.0").write_bytes(b"x" * 4096)
    kept = run_json("clean", str(tmp_path))
    assert kept["removed"] == [] and kept["kept"] == [str(scratch_dir)] and scratch_dir.exists()
    forced = run_json("clean", str(tmp_path), "--force")
    assert forced["removed"] == [str(scratch_dir)] and not scratch_dir.exists()


def hosts_session(path: Path, hosts: list, run_id: str):
    """A multi-host session on `hosts` that has contacted none of them: for its job files and scratch names."""
    from ckplan.probe.backends.hosts import HostsBackend, HostsOptions, HostsSession
    from ckplan.probe.engine import Silent, TargetSpec

    backend = HostsBackend(TargetSpec(str(path), options=HostsOptions(hosts=",".join(map(str, hosts)))))
    backend.hosts = hosts
    return HostsSession(backend, run_id, Silent(), None)


# --- the agent's info port and --linger; the probe's placement (--agent-info-port) and --drop-caches ----------------


def _info(port: int) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_agent_info_is_503_until_fio_listens_then_200():
    """The info server alone (no fio behind its port), then with a listener there: a readiness probe's answers."""
    from ckplan.agent import AgentSettings, info_server

    fio_port, info_port = _free_port(), _free_port()
    environ = {"CKPLAN_NODE_NAME": "gpu-node-07", "CKPLAN_POD_NAME": "ckplan-agents-3-abcde"}
    old = {k: os.environ.get(k) for k in environ}
    os.environ.update(environ)
    try:
        with info_server(AgentSettings("127.0.0.1", fio_port, info_port=info_port)):
            status, body = _info(info_port)
            assert (status, body["ready"], body["node"], body["fio_port"]) == (503, False, "gpu-node-07", fio_port)
            with socket.socket() as listener:
                listener.bind(("127.0.0.1", fio_port))
                listener.listen()
                status, body = _info(info_port)
        assert (status, body["ready"], body["pod"]) == (200, True, "ckplan-agents-3-abcde")
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    with pytest.raises(OSError):  # the server went with the context
        _info(info_port)


def test_agent_lingers_only_after_a_probe_has_connected(tmp_path):
    """--linger 1s: no probe for 3 s and the agent stays; a probe's connection ends, and it exits about 1 s after."""
    port, info_port = _free_port(), _free_port()
    job = tmp_path / "job.fio"
    job.write_text("[ckplan-handshake]\nioengine=null\nsize=4k\n")
    agent = _agent(["--port", str(port), "--info-port", str(info_port), "--linger", "1s"], tmp_path)
    try:
        _wait_listening("127.0.0.1", port, agent)
        time.sleep(3)
        assert agent.poll() is None  # nobody has connected yet: an agent waits for the controller's image pull
        client = subprocess.run(["fio", f"--client=ip:127.0.0.1,{port}", str(job)], capture_output=True, timeout=60)
        ended = time.monotonic()
        assert client.returncode == 0
        _, err = agent.communicate(timeout=20)
        stopped = time.monotonic()
    finally:
        _stop(agent, "127.0.0.1", port, tmp_path)
    assert agent.returncode == 0 and "the probe that connected is done: none for 1 s (--linger)" in err
    assert 0.5 <= stopped - ended <= 5, stopped - ended
    assert server_processes(["127.0.0.1"], port, os.path.realpath(tmp_path)) == []


def test_probe_names_a_host_whose_agent_gives_no_info(tmp_path):
    """No info server behind the port (a plain `ckplan agent`): refused before any fio job is sent."""
    args = ["--hosts", "127.0.0.1:8765", "--agent-info-port", str(_free_port()), "--quick", "--writers", "1"]
    proc = run_cli("probe", str(tmp_path), *args)
    assert_one_line_error(proc, "agent info port", code=3)
    assert "no agent info from 127.0.0.1:8765 ([Errno 111] Connection refused)" in proc.stderr
    assert scratch(tmp_path) == []


def test_probe_refuses_an_agent_of_another_fio_port(tmp_path):
    """The info port answers for an agent whose fio server is on another port: the map would be wrong."""
    from ckplan.agent import AgentSettings, info_server

    info_port = _free_port()
    with info_server(AgentSettings("127.0.0.1", 9999, info_port=info_port)):
        args = ["--hosts", "127.0.0.1:8765", "--agent-info-port", str(info_port), "--quick", "--writers", "1"]
        proc = run_cli("probe", str(tmp_path), *args)
    assert_one_line_error(proc, "its agent runs fio's server on port 9999, not 8765", code=3)


def test_drop_caches_runs_before_each_read_job_and_its_output_is_removed(tmp_path):
    from ckplan.probe import fio
    from ckplan.probe.backends.hosts import DROP_CACHES
    from ckplan.probe.hostlist import Host

    session = hosts_session(tmp_path, [Host("10.0.0.1")], "r1")
    session.backend.drop_caches = True
    read, _ = fio.bandwidth_job("read", 2, 1 << 20, 5.0)
    write, _ = fio.bandwidth_job("buffered", 2, 1 << 20, 5.0)
    text = session.jobfile(Host("10.0.0.1"), [write, read])
    sections = {s.split("]")[0]: s for s in text.split("\n[")}
    assert f"exec_prerun={DROP_CACHES}" in sections["bw-read-2"]
    assert "exec_prerun" not in sections["bw-buffered-2"]
    assert "bw-read-2.prerun.txt" in sections["ckplan-cleanup"]
    session.backend.drop_caches = False
    assert DROP_CACHES not in session.jobfile(Host("10.0.0.1"), [write, read])


def test_a_placement_must_name_every_host():
    from ckplan.profile import StorageProfile
    from ckplan.profile_store import resolve

    data = resolve("nfs").model_dump() | {"source": "measured", "hosts": 2}
    StorageProfile.model_validate(data | {"placement": [{"host": f"h{i}:8765", "node": f"n{i}"} for i in (1, 2)]})
    with pytest.raises(ValueError, match="placement names 1 hosts, the profile's hosts are 2"):
        StorageProfile.model_validate(data | {"placement": [{"host": "h1:8765", "node": "n1"}]})


def test_drop_caches_on_a_host_that_cannot_is_refused_before_measuring():
    """A fio server that runs as nobody cannot write /proc/sys/vm/drop_caches: fio skips the check's read without
    an error, and the probe names the host (exit 3) instead of timing reads that never ran; nothing is left."""
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run a fio server as another user")
    port = _free_port()
    top = Path(tempfile.mkdtemp(prefix="ckplan-nobody-"))
    try:
        target, cwd = top / "target", top / "server"
        for d in (top, target, cwd):
            d.mkdir(exist_ok=True)
            d.chmod(0o777)
        server = subprocess.Popen(
            ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "fio", f"--server=ip:127.0.0.1,{port}"],
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_listening("127.0.0.1", port, server)
            proc = run_cli(
                "probe", str(target), "--hosts", f"127.0.0.1:{port}", "--drop-caches", "--quick", "--writers", "1"
            )
        finally:
            server.kill()
            server.wait()
            kill_servers(["127.0.0.1"], port, str(cwd))
        assert_one_line_error(proc, "--drop-caches: 127.0.0.1 cannot drop the page cache", code=3)
        assert os.listdir(target) == [] and os.listdir(cwd) == []
    finally:
        shutil.rmtree(top)
