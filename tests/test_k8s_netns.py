"""The manifests' own commands, run for real: each pod's container command and arguments, read from what
`ckplan k8s` prints, with the environment Kubernetes would give it, in network namespaces named and resolved as
the pods would be, with one shared directory standing in for the claim.

What stands in for Kubernetes, and only that: the kubelet's start of each container (its command, args,
workingDir and env, the downward API's spec.nodeName and metadata.name, JOB_COMPLETION_INDEX, HOSTNAME), the
claim (the same directory in every pod, at the manifests' mount path), the plan's ConfigMap volume (its files
behind the `..data` links a ConfigMap volume has), cluster DNS (an /etc/hosts of the pods' names, in the
controller's own mount namespace), the readiness probe (the container's httpGet, from outside the pod), and the
pod's end (SIGTERM, as on its deletion). N = 3 agents; no cluster is used."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckplan.k8s.manifests import BEGIN, END
from ckplan.request import PlanRequest
from tests.conftest import ckplan_exe, run_cli
from tests.netns import kill_servers, namespaces, server_processes

pytestmark = [pytest.mark.fio, pytest.mark.root]
NODES = 3
# the kubelet's volume mounts, in the pod's own mount namespace: each source directory bound onto its mountPath
BIND_ALL = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 99; shift 2; done; shift; exec "$@"'


def in_pod(binds: dict[str, Path]) -> list[str]:
    """The command prefix that runs a container's command with `binds` (mountPath → this machine's directory)."""
    args = ["unshare", "--mount", "--propagation", "private", "sh", "-c", BIND_ALL, "sh"]
    for target, source in binds.items():
        args += [str(source), target]
    return [*args, "--"]


def agent_pods(objects: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any], int]]:
    """Each agent pod as the Job or JobSet controller would make it: (hostname, subdomain, container, index)."""
    pods = []
    for o in objects:
        if o["kind"] == "Job" and o["spec"].get("completionMode") == "Indexed":
            template = o["spec"]["template"]
            for i in range(o["spec"]["completions"]):  # an Indexed Job's pod hostname is JOB-INDEX
                pods.append((f"{o['metadata']['name']}-{i}", template["spec"]["subdomain"], template, i))
        if o["kind"] == "JobSet":
            subdomain = o["spec"]["network"]["subdomain"]
            for rj in o["spec"]["replicatedJobs"]:
                if rj["name"] != "agents":
                    continue
                for j in range(rj["replicas"]):  # JobSet's: JOBSET-REPLICATEDJOB-JOBINDEX-PODINDEX
                    pods.append(
                        (
                            f"{o['metadata']['name']}-{rj['name']}-{j}-0",
                            subdomain,
                            rj["template"]["spec"]["template"],
                            0,
                        )
                    )
    return [(host, sub, template["spec"]["containers"][0], i) for host, sub, template, i in pods]


def controller(objects: list[dict[str, Any]]) -> dict[str, Any]:
    templates = [o["spec"]["template"] for o in objects if o["kind"] == "Job"]
    templates += [
        rj["template"]["spec"]["template"]
        for o in objects
        if o["kind"] == "JobSet"
        for rj in o["spec"]["replicatedJobs"]
    ]
    (probe,) = [t for t in templates if t["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"]
    return probe["spec"]["containers"][0]


def pod_env(container: dict[str, Any], node: str, pod: str, index: int, hostname: str, path: str) -> dict[str, str]:
    fields = {"spec.nodeName": node, "metadata.name": pod}
    env = {"PATH": path, "HOSTNAME": hostname, "JOB_COMPLETION_INDEX": str(index), "HOME": "/root"}
    for e in container.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def configmap_volume(where: Path, data: dict[str, str]) -> None:
    """A ConfigMap volume's layout: each key a link into `..data`, itself a link to a timestamped directory."""
    stamped = where / "..2026_12_07_00_00_00.000000000"
    stamped.mkdir()
    for key, value in data.items():
        (stamped / key).write_text(value)
        (where / key).symlink_to(f"..data/{key}")
    (where / "..data").symlink_to(stamped.name)


def wait_ready(addr: str, container: dict[str, Any], proc: subprocess.Popen, timeout_s: float = 20) -> int:
    """The readiness probe, as the kubelet runs it: GET on the container's named port; its status once 200."""
    get = container["readinessProbe"]["httpGet"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == get["port"])
    deadline, seen = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the agent exited {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://{addr}:{port}{get['path']}", timeout=2) as reply:
                return reply.status
        except urllib.error.HTTPError as exc:
            seen.append(exc.code)  # 503 until fio's server listens
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the agent at {addr} never became ready (answers: {sorted(set(seen))})")


@pytest.mark.parametrize("form", ["job", "jobset"])
def test_the_manifests_commands_probe_from_three_pods(tmp_path, form):
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("fio") is None:
        pytest.skip("needs root, unshare and fio: network namespaces and a private /etc/hosts")
    shared = tmp_path / "claim"
    shared.mkdir()
    plan = tmp_path / "plan.json"
    plan.write_text(
        PlanRequest.model_validate({"params": 2e7, "gpus": NODES, "gpus_per_node": 1}).plan().model_dump_json()
    )
    args = ["k8s", "--nodes", str(NODES), "--claim", "shared-ckpt", "--form", form]
    drop = form == "jobset"  # one form with the privileged cache drop (root here), one without
    args += ["--storage-class", "glusterfs-rwx", "--plan", str(plan)] + (["--drop-caches"] if drop else [])
    args += ["--", "--quick", "--no-calibrate", "--writers", "1"]
    made = run_cli(*args)
    assert made.returncode == 0, made.stderr
    objects = [d for d in yaml.safe_load_all(made.stdout) if d]
    pods = agent_pods(objects)
    assert len(pods) == NODES
    probe = controller(objects)
    bin_path = os.pathsep.join([os.path.dirname(ckplan_exe()[0]), os.environ["PATH"]])
    (claim_path,) = {m["mountPath"] for _, _, c, _ in pods for m in c["volumeMounts"]}
    plan_path = next(m["mountPath"] for m in probe["volumeMounts"] if m["name"] == "plan")
    made_dirs = [Path(p) for p in (claim_path, plan_path) if not Path(p).exists()]  # mount points, removed after
    agents: list[tuple[subprocess.Popen, Path, str]] = []
    with namespaces(NODES) as nodes:
        if nodes[0][0] is None:
            pytest.skip("network namespaces unavailable")
        try:
            for d in made_dirs:
                d.mkdir()
            for k, ((hostname, _, container, index), (ns, addr)) in enumerate(zip(pods, nodes, strict=True)):
                workdir = tmp_path / f"{hostname}-workdir"  # the container's workingDir
                workdir.mkdir()
                env = pod_env(container, f"node-{k}", f"{hostname}-x7k2p", index, hostname, bin_path)
                cmd = ["ip", "netns", "exec", ns, *in_pod({claim_path: shared}), *container["command"]]
                proc = subprocess.Popen(
                    [*cmd, *container["args"]], cwd=workdir, env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                )  # fmt: skip
                agents.append((proc, workdir, addr))
            for (proc, _, addr), (_, _, container, _) in zip(agents, pods, strict=True):
                assert wait_ready(addr, container, proc) == 200
            hosts = tmp_path / "hosts"
            hosts.write_text(
                "127.0.0.1 localhost\n"
                + "".join(f"{addr} {host}.{sub}\n" for (host, sub, _, _), (_, addr) in zip(pods, nodes, strict=True))
            )
            configmap = tmp_path / "configmap"
            configmap.mkdir()
            (data,) = [o["data"] for o in objects if o["kind"] == "ConfigMap"]
            configmap_volume(configmap, data)
            controller_dir = tmp_path / "controller-workdir"
            controller_dir.mkdir()
            binds = {"/etc/hosts": hosts, claim_path: shared, plan_path: configmap}
            cmd = [*in_pod(binds), *probe["command"], *probe["args"]]
            env = pod_env(probe, "node-c", "ckplan-probe-q8r4z", 0, "ckplan-probe-q8r4z", bin_path) | {"NO_COLOR": "1"}
            run = subprocess.run(cmd, cwd=controller_dir, env=env, capture_output=True, text=True, timeout=400)
            assert all(p.poll() is None for p, _, _ in agents)  # the probe is done; the agents wait (--linger)
        finally:
            for proc, _, _ in agents:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)  # the pod's end
            logs = [proc.communicate(timeout=30)[0] for proc, _, _ in agents]
            left = [pid for _, workdir, _ in agents for pid in server_processes(["0.0.0.0"], 8765, str(workdir))]
            for _, workdir, _ in agents:
                kill_servers(["0.0.0.0"], 8765, str(workdir))
            for d in made_dirs:
                d.rmdir()
    assert run.returncode == 0, run.stderr[-3000:]
    # the profile comes back through the log, as `kubectl logs` gives it (stdout and stderr together), and the
    # fetch step printed by `ckplan k8s` extracts it
    (fetch,) = [s for s in made.stderr.splitlines() if " logs " in s]
    sed = fetch.split("| ", 1)[1].split(" > ")[0].strip()
    extracted = subprocess.run(["sh", "-c", sed], input=run.stderr + run.stdout, capture_output=True, text=True)
    assert BEGIN in run.stdout and END in run.stdout
    profile = json.loads(extracted.stdout)
    assert profile["hosts"] == NODES and profile["target"] == claim_path == "/ckpt"
    assert [p["hosts"] for p in profile["aggregate_bandwidth"]] == [1, 2, 3]
    assert profile["replay"] is not None and profile["replay"]["nodes"] == NODES
    assert profile["placement"] == [
        {"host": f"{host}.{sub}:8765", "node": f"node-{k}", "pod": f"{host}-x7k2p"}
        for k, (host, sub, _, _) in enumerate(pods)
    ]
    table = " ".join(run.stdout.split())  # the profile's table, before the markers, as rich wrapped it
    host, sub = pods[1][0], pods[1][1]
    assert f"{host}.{sub}:8765 on node node-1 (pod {host}-x7k2p)" in table and "kubernetes.claim=shared-ckpt" in table
    assert profile["labels"] == {
        "kubernetes.form": form,
        "kubernetes.namespace": "default",
        "kubernetes.claim": "shared-ckpt",
        "kubernetes.storage_class": "glusterfs-rwx",
    }
    said = "dropping its whole page cache before each read run" if drop else "--drop-caches drops it all"
    assert any("reads made cold" in n and said in n for n in profile["notes"]), profile["notes"]
    # each agent stopped on SIGTERM with every fio process it started, and left nothing behind
    assert all(proc.returncode == 0 for proc, _, _ in agents), logs
    assert all("ckplan agent: stopping on SIGTERM" in log for log in logs), logs
    assert left == []
    assert [os.listdir(workdir) for _, workdir, _ in agents] == [[]] * NODES
    assert os.listdir(shared) == []
    assert os.listdir(controller_dir) == ["ckplan-profile.json"]
