"""Files another user could plant where ckplan reads or removes: a scratch directory's marker in a target or in
/dev/shm, a stale scratch tree, a saved profile in a shared config directory. Each is refused or removed as itself,
never followed, never waited on, never read without end, and a tree of any depth goes without recursion.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckplan import scratch
from tests.conftest import assert_one_line_error, run_cli, run_json

# a planted file that ckplan waited on would hang the command: its timeout turns that into a failure, not a stall
TIMEOUT_S = 60


def planted_scratch(target: Path, name: str = "evil") -> Path:
    """A directory named like a probe's scratch, as another user could make one."""
    d = target / f"{scratch.SCRATCH_PREFIX}{name}-1-deadbeef"
    d.mkdir()
    return d


def deep_tree(top: Path, depth: int, outside: Path) -> None:
    """`depth` nested directories under `top`, each with a file, and every 500th a link to `outside`."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
            if level % 500 == 0:
                os.symlink(outside, "link", dir_fd=fd)
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


@pytest.fixture
def victim(tmp_path) -> Path:
    """Files outside the target that a followed link would reach: they must survive."""
    v = tmp_path / "victim"
    v.mkdir()
    (v / "keep.txt").write_text("mine")
    # a live owner's marker: read through a followed link, it would make the planted directory look live
    (v / "marker.json").write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid(), "started": 0}))
    return v


def test_a_marker_that_is_a_fifo_is_not_waited_on(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    d = planted_scratch(target)
    os.mkfifo(d / scratch.MARKER)
    out = run_json("clean", str(target), timeout=TIMEOUT_S)
    assert out["removed"] == [str(d)] and not d.exists()


def test_a_marker_linked_elsewhere_is_not_followed(tmp_path, victim):
    target = tmp_path / "target"
    target.mkdir()
    zero, live = planted_scratch(target, "zero"), planted_scratch(target, "live")
    (zero / scratch.MARKER).symlink_to("/dev/zero")
    (live / scratch.MARKER).symlink_to(victim / "marker.json")
    # followed, the second link names this live test process as the owner and the directory would be kept
    out = run_json("clean", str(target), timeout=TIMEOUT_S)
    assert sorted(out["removed"]) == sorted([str(zero), str(live)]) and out["kept"] == []
    assert (victim / "marker.json").exists() and (victim / "keep.txt").read_text() == "mine"
    assert os.path.exists("/dev/zero")


def test_an_oversized_marker_is_not_read_whole(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    d = planted_scratch(target)
    marker = d / scratch.MARKER
    with marker.open("wb") as f:
        f.truncate(8 * 2**30)  # sparse: 8 GiB that a plain read_text would try to hold
    (found,) = scratch.scratch_dirs(target)
    assert (found.path, found.host, found.pid, found.live) == (d, None, None, False)


def test_a_scratch_name_that_is_a_link_is_left_alone(tmp_path, victim):
    target = tmp_path / "target"
    target.mkdir()
    link = target / f"{scratch.SCRATCH_PREFIX}evil-1-deadbeef"
    link.symlink_to(victim, target_is_directory=True)
    out = run_json("clean", str(target), timeout=TIMEOUT_S)
    assert out["removed"] == [] and link.is_symlink()
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt", "marker.json"]


def test_a_3000_deep_stale_scratch_tree_is_removed_without_following_links(tmp_path, victim):
    target = tmp_path / "target"
    target.mkdir()
    d = planted_scratch(target)
    deep_tree(d, 3000, victim)
    # Python's shutil.rmtree recurses once per level and stops at the interpreter's limit (1,000)
    out = run_json("clean", str(target), timeout=TIMEOUT_S)
    assert out["removed"] == [str(d)]
    assert list(target.iterdir()) == []
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt", "marker.json"]


def test_remove_tree_takes_any_shape(tmp_path, victim):
    """Deeper than the descriptors it holds, wide, links to files and directories, a FIFO: all of it goes, and
    nothing a link points at."""
    top = tmp_path / "top"
    top.mkdir()
    deep_tree(top, scratch.MAX_HELD_LEVELS * 3 + 7, victim)
    for i in range(200):
        (top / f"wide-{i}").mkdir()
        (top / f"wide-{i}" / "f").write_bytes(b"x")
    os.mkfifo(top / "fifo")
    (top / "file-link").symlink_to(victim / "keep.txt")
    scratch.remove_tree(top)
    assert not top.exists()
    assert (victim / "keep.txt").read_text() == "mine"
    link = tmp_path / "a-link"
    link.symlink_to(victim, target_is_directory=True)
    scratch.remove_tree(link)  # a link given as the top is removed itself
    assert not link.is_symlink() and (victim / "keep.txt").exists()


@pytest.fixture
def profiles(tmp_path) -> tuple[Path, dict[str, str]]:
    """A config directory with a saved profile planted as a FIFO, or as a link to /dev/zero or to a real profile."""
    config = tmp_path / "config"
    saved = config / "ckplan" / "profiles"
    saved.mkdir(parents=True)
    return saved, {"XDG_CONFIG_HOME": str(config)}


def test_a_saved_profile_that_is_a_fifo_is_refused(profiles):
    saved, env = profiles
    os.mkfifo(saved / "shared.json")
    for args in (["recommend", "--storage", "shared"], ["profiles"]):
        proc = run_cli(*args, env=env, timeout=TIMEOUT_S)
        assert_one_line_error(proc, f"storage profile {saved / 'shared.json'} is a FIFO, not a regular file")


def test_a_saved_profile_linked_elsewhere_is_refused(profiles):
    saved, env = profiles
    (saved / "zero.json").symlink_to("/dev/zero")
    proc = run_cli("recommend", "--storage", "zero", env=env, timeout=TIMEOUT_S)
    assert_one_line_error(proc, "zero.json is a symbolic link, which ckplan does not follow there")


def test_saving_a_profile_replaces_a_planted_link_instead_of_writing_through_it(profiles, tmp_path, monkeypatch):
    from ckplan import catalog, profile_store

    saved, env = profiles
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (saved / "nvme.json").symlink_to(victim)
    monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])
    path = profile_store.save(catalog.storage_classes()["local-nvme"], "nvme")
    assert path == saved / "nvme.json" and not path.is_symlink()
    assert profile_store.load_file(path, follow=False).name == "nvme"
    assert victim.read_text() == "mine"
    assert sorted(p.name for p in saved.iterdir()) == ["nvme.json"]


def test_a_plan_named_through_a_link_to_dev_zero_is_one_line(tmp_path):
    link = tmp_path / "plan.json"
    link.symlink_to("/dev/zero")
    proc = run_cli("recommend", "--plan", str(link), "--storage", "local-nvme", timeout=TIMEOUT_S)
    assert_one_line_error(proc, f"{link} is a character device, not a regular file")
