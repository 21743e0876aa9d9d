"""Slurm hostlist expressions (ckplan/slurm.py) in --hosts (ckplan/probe/hostlist.py) and `--hosts slurm`."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckplan import slurm
from ckplan.errors import InputError
from ckplan.probe.hostlist import Host, parse_hosts
from ckplan.units import MAX_HOSTS
from tests.conftest import assert_one_line_error, ckplan_exe, run_cli


@pytest.mark.parametrize(
    "expr,names",
    [
        ("gpu[001-003,020],io[1-2]", ["gpu001", "gpu002", "gpu003", "gpu020", "io1", "io2"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),  # a range keeps its low bound's width, past the digit count
        ("n[9-11]", ["n9", "n10", "n11"]),  # and does not pad where the low bound has none
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),  # text after the bracket
        (
            "r[1-2]n[01-02]",
            ["r1n01", "r1n02", "r2n01", "r2n02"],
        ),  # several brackets: every combination, the last fastest
        ("10.0.[1-2].5", ["10.0.1.5", "10.0.2.5"]),
        ("a[3,1,2]", ["a3", "a1", "a2"]),  # the expression's order is kept
        ("plain", ["plain"]),
        ("a, b ,,c", ["a", " b ", "c"]),  # empty parts between commas are skipped; the caller strips names
    ],
)
def test_expand(expr, names):
    assert slurm.expand(expr) == names
    assert slurm.count(expr) == len(names)


@given(
    st.lists(st.tuples(st.integers(0, 120), st.integers(0, 30), st.integers(1, 4)), min_size=1, max_size=4),
    st.sampled_from(["", "-ib", ".cluster"]),
)
def test_expand_matches_a_plain_loop(ranges, suffix):
    """Any list of low-high ranges of any padding expands to the numbers each range names, formatted at the low
    bound's width, with the suffix after each."""
    items = [f"{low:0{w}d}-{low + span:0{w}d}" if span else f"{low:0{w}d}" for low, span, w in ranges]
    expected = [f"x{i:0{w}d}{suffix}" for low, span, w in ranges for i in range(low, low + span + 1)]
    assert slurm.expand(f"x[{','.join(items)}]{suffix}") == expected


@pytest.mark.parametrize(
    "expr,fragment",
    [
        ("gpu[1-4", "never closed"),
        ("gpu1-4]", "closes no bracket"),
        ("gpu[1-[2]]", "inside another"),
        ("gpu[4-1]", "runs backwards"),
        ("gpu[]", "empty range"),
        ("gpu[1,,3]", "empty range"),
        ("gpu[1-]", "not a number"),
        ("gpu[a-c]", "not a number"),
        ("gpu[1-2]x:99999", "bad port"),
        ("h1:2:3", "bad host entry"),
        ("gpu_[1-2]", "bad host name"),
    ],
)
def test_malformed_expressions_are_one_line_errors(expr, fragment):
    proc = run_cli("probe", "/tmp", "--hosts", expr)
    assert_one_line_error(proc, fragment)
    assert "--hosts" in proc.stderr and "‹" not in proc.stderr  # the library's ‹hosts› became the flag


def test_a_bad_line_of_a_hosts_file_is_named(tmp_path):
    f = tmp_path / "hosts.txt"
    f.write_text("# nodes\nnode[01-04]\nio[3-1]:8766\n")
    assert_one_line_error(run_cli("probe", "/tmp", "--hosts-file", str(f)), "--hosts-file line 3")


def test_expansion_is_bounded_before_any_name_is_made():
    assert len(slurm.expand("n[1-65536]")) == MAX_HOSTS
    with pytest.raises(InputError, match="65,537 hosts"):
        slurm.expand("n[1-65536],m")
    with pytest.raises(InputError, match="100 hosts; at most 99"):
        slurm.expand("n[1-10]x[1-10]", limit=99)
    start = time.monotonic()
    proc = run_cli("probe", "/tmp", "--hosts", "n[1-999999999999]x[1-1000]")  # 1e15 names if they were made
    assert time.monotonic() - start < 20
    assert_one_line_error(proc, "expands to 999,999,999,999,000 hosts; at most 65,536 are allowed")


def test_the_bound_counts_every_entry_and_the_hosts_file(tmp_path):
    f = tmp_path / "hosts.txt"
    f.write_text("b[1-30000]\n")
    with pytest.raises(InputError, match=r"'b\[1-30000\]' expands to 30,000 hosts, 70,000 in all; at most 65,536"):
        parse_hosts("a[1-40000]", f)


def test_a_port_after_an_entry_applies_to_each_of_its_hosts():
    hosts = parse_hosts("gpu[001-002,020],io[1-2]-ib:8766,[::1]:9000", None, environ={})
    assert hosts == [
        Host("gpu001"),
        Host("gpu002"),
        Host("gpu020"),
        Host("io1-ib", 8766),
        Host("io2-ib", 8766),
        Host("::1", 9000),
    ]
    assert Host("gpu001").port == 8765


def test_the_same_host_twice_is_named():
    with pytest.raises(InputError, match="host n2:8765 is listed twice"):
        parse_hosts("n[1-3],n2", None, environ={})


# --- --hosts slurm ---------------------------------------------------------------------------------------------


def test_slurm_reads_the_job_nodelist_first():
    seen: list[str] = []
    env = {"SLURM_JOB_NODELIST": "gpu[01-03],io1", "SLURM_NODELIST": "other[1-9]"}
    hosts = parse_hosts("slurm:8800", None, environ=env, notice=seen.append)
    assert hosts == [Host("gpu01", 8800), Host("gpu02", 8800), Host("gpu03", 8800), Host("io1", 8800)]
    assert seen == ["--hosts slurm: 4 nodes in $SLURM_JOB_NODELIST (gpu[01-03],io1): gpu01, gpu02, gpu03, io1"]
    # SLURM_NODELIST (older Slurm, and salloc's shells) where the job's variable is absent
    assert [h.name for h in parse_hosts("slurm", None, environ={"SLURM_NODELIST": "n[7-8]"})] == ["n7", "n8"]


def test_slurm_notice_shortens_a_long_list():
    seen: list[str] = []
    parse_hosts("slurm", None, environ={"SLURM_JOB_NODELIST": "n[001-100]"}, notice=seen.append)
    assert seen[0].endswith("n001, n002, n003, n004, n005, n006, n007, n008, … (92 more)") and "100 nodes" in seen[0]


def test_hosts_slurm_on_the_command_line_says_which_nodes_it_found(tmp_path):
    # .invalid never resolves: the probe stops at its first connection, after the notice
    env = {"SLURM_JOB_NODELIST": "gpu[1-2].invalid", "SLURM_NODELIST": ""}
    proc = run_cli("probe", str(tmp_path), "--hosts", "slurm", "--agent-wait", "5s", env=env)
    lines = proc.stderr.strip().splitlines()
    assert (
        lines[0]
        == "ckplan: --hosts slurm: 2 nodes in $SLURM_JOB_NODELIST (gpu[1-2].invalid): gpu1.invalid, gpu2.invalid"
    )
    assert proc.returncode == 2 and len(lines) == 2 and "'gpu1.invalid' does not resolve" in lines[1], proc.stderr


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": " "}], ids=["unset", "empty"])
def test_hosts_slurm_outside_a_job_is_one_line(env):
    outside = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")} | {"NO_COLOR": "1"} | env
    proc = subprocess.run(
        ckplan_exe() + ["probe", "/tmp", "--hosts", "slurm"], capture_output=True, text=True, env=outside
    )
    assert_one_line_error(
        proc, "--hosts slurm reads the job's nodes from SLURM_JOB_NODELIST or SLURM_NODELIST, and neither is set"
    )


def test_a_malformed_slurm_nodelist_names_the_variable():
    proc = run_cli("probe", "/tmp", "--hosts", "slurm", env={"SLURM_JOB_NODELIST": "gpu[1-4"})
    assert_one_line_error(
        proc, "--hosts (slurm: SLURM_JOB_NODELIST=gpu[1-4): bad host list 'gpu[1-4': a '[' is never closed"
    )


def test_agent_wait_needs_hosts():
    assert_one_line_error(run_cli("probe", "/tmp", "--agent-wait", "1m"), "--agent-wait applies to a multi-host probe")
