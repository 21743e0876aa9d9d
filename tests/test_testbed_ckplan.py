"""ckplan against a real network filesystem: probes from one node and from 2 and 4 nodes' agents, a replay of a
plan, and `validate`, on scripts/_testbed.py's GlusterFS volume (4 nodes, 100 Mbit/s links, a 400 Mbit/s server
port), each figure pinned to the rates the links are shaped to."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from scripts import _testbed as tb
from tests.conftest import ckplan_exe, run_cli, run_json

pytestmark = pytest.mark.testbed

NODES = 4
CLIENT_LINK = 100e6 / 8  # bytes/s, one node's link
SERVER_PORT = 400e6 / 8  # the volume's, all nodes together
# measured here through the shaped links: 0.96 of the rate with dd, 0.96-0.98 with fio (tbf's own framing and
# FUSE's round trips); a figure outside these bounds means the bytes did not cross the link that was meant
LOW, HIGH = 0.75, 1.02


def _within(figure: float, rate: float) -> bool:
    return LOW * rate <= figure <= HIGH * rate


def _on_node(node: tb.Node, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        node.cmd(*ckplan_exe(), *args), capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.fixture(scope="module")
def bed():
    try:
        tb.check_available()
    except tb.Unavailable as exc:
        pytest.skip(str(exc))
    with tb.testbed(nodes=NODES, server_rate="400mbit", client_rate="100mbit", agents=True) as bed:
        yield bed


@pytest.fixture(scope="module")
def one_node_profile(bed, tmp_path_factory) -> Path:
    """A default probe (every phase, its default budgets) of the volume from node 2, inside its namespace."""
    out = tmp_path_factory.mktemp("testbed") / "one-node.json"
    node = bed.nodes[1]
    proc = _on_node(node, "probe", str(node.mount), "--no-calibrate", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _left_on(path: Path) -> list[str]:
    return os.listdir(path)


def test_a_default_probe_from_one_node_measures_its_link_and_names_glusterfs(bed, one_node_profile):
    p = json.loads(one_node_profile.read_text())
    assert (p["fs_type"], p["storage_class"], p["shared"], p["hosts"]) == ("fuse.glusterfs", "glusterfs", True, 1)
    assert p["failed_phases"] == []
    assert all(_within(b["bytes_per_s"], CLIENT_LINK) for b in p["buffered_bandwidth"]), p["buffered_bandwidth"]
    assert all(_within(b["bytes_per_s"], CLIENT_LINK) for b in p["read_bandwidth"]), p["read_bandwidth"]
    # every create, write and fsync is a round trip to the server through FUSE: far below a local disk's rate
    assert 0 < p["small_files"]["files_per_s"] < 2000
    assert _left_on(bed.path) == []


def test_probes_from_2_and_4_nodes_see_the_links_add_up_to_the_server_port(bed, tmp_path):
    two = run_json(
        "probe", str(bed.path), "--hosts", ",".join(bed.agents[:2]), "--quick", "--no-calibrate", timeout=600
    )
    assert (two["fs_type"], two["storage_class"], two["hosts"]) == ("fuse.glusterfs (multi-host)", "glusterfs", 2)
    curve = {a["hosts"]: a["bytes_per_s"] for a in two["aggregate_bandwidth"]}
    assert sorted(curve) == [1, 2]
    assert _within(curve[1], CLIENT_LINK) and _within(curve[2], 2 * CLIENT_LINK), curve

    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli(
            "size", "--params", "2e7", "--optimizer", "adam", "--framework", "deepspeed", "--zero", "3",
            "--gpus", str(2 * NODES), "--gpus-per-node", "2", "--json", check=True,
        ).stdout
    )  # fmt: skip
    total = json.loads(plan.read_text())["total_bytes"]
    four = run_json(
        "probe", str(bed.path), "--hosts", f"{tb.SUBNET}.[11-14]:{tb.AGENT_PORT}", "--quick", "--no-calibrate",
        "--plan", str(plan), timeout=600,
    )  # fmt: skip
    curve = {a["hosts"]: a["bytes_per_s"] for a in four["aggregate_bandwidth"]}
    assert sorted(curve) == [1, 2, 4]
    # four 100 Mbit/s links fill the 400 Mbit/s port: the knee is at 4
    assert _within(curve[4], min(NODES * CLIENT_LINK, SERVER_PORT)), curve
    replay = four["replay"]
    assert (replay["nodes"], replay["bytes"]) == (NODES, total)
    assert _within(total / replay["seconds"], SERVER_PORT), replay
    assert _left_on(bed.path) == []


def test_validate_saves_one_nodes_share_through_its_link_as_predicted(bed, one_node_profile, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli(
            "size", "--params", "2e7", "--optimizer", "adam", "--framework", "deepspeed", "--zero", "3",
            "--gpus", "2", "--gpus-per-node", "2", "--json", check=True,
        ).stdout
    )  # fmt: skip
    node = bed.nodes[0]
    proc = _on_node(
        node, "validate", str(node.mount), "--plan", str(plan), "--storage", str(one_node_profile),
        "--scale", "0.25", "--repeats", "2", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)
    # 60 MB at one node's 12.5 MB/s: measured 5.05 s against 5.09 predicted here
    assert _within(v["bytes"] / v["measured_seconds"], CLIENT_LINK), v["measured"]
    assert abs(v["error_percent"]) <= 15, v
    assert _left_on(node.mount) == []
