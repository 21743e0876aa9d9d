"""Real mounts for probe tests: size-limited tmpfs, ramfs, loop-mounted xfs/btrfs, sshfs over loopback."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting filesystems needs root")


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@contextlib.contextmanager
def mounted(where: Path, fstype: str, options: str = "", source: str | None = None):
    where.mkdir(parents=True, exist_ok=True)
    args = ["mount", "-t", fstype] + (["-o", options] if options else []) + [source or fstype, str(where)]
    _sh(*args)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextlib.contextmanager
def loop_fs(tmp: Path, mkfs: str, size: str = "512M"):
    if not shutil.which(mkfs):
        pytest.skip(f"{mkfs} is not installed (apt-get install {'xfsprogs' if 'xfs' in mkfs else 'btrfs-progs'})")
    image = tmp / "image"
    _sh("truncate", "-s", size, str(image))
    _sh(mkfs, "-q", str(image)) if "xfs" in mkfs else _sh(mkfs, "-q", "-f", str(image))
    mnt = tmp / "mnt"
    mnt.mkdir()
    try:
        _sh("mount", "-o", "loop", str(image), str(mnt))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot loop-mount here: {exc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def sshfs_loopback(tmp: Path):
    """A FUSE target: sshfs to an sshd started on 127.0.0.1 for this test."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not shutil.which("sshfs") or not os.path.exists(sshd) or not os.path.exists("/dev/fuse"):
        pytest.skip("sshfs, sshd or /dev/fuse is missing (apt-get install sshfs openssh-server)")
    keys = tmp / "keys"
    keys.mkdir()
    for name in ("client", "host"):
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name))
    port = _free_port()
    config = keys / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys}/host\nAuthorizedKeysFile {keys}/client.pub\n"
        f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nPidFile {keys}/sshd.pid\n"
        "Subsystem sftp internal-sftp\nUsePAM no\nStrictModes no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    _sh(sshd, "-f", str(config), "-E", str(keys / "log"))
    remote, mnt = tmp / "remote", tmp / "sshfs mnt"
    remote.mkdir()
    mnt.mkdir()
    try:
        for _ in range(50):
            proc = subprocess.run(
                [
                    "sshfs",
                    "-p",
                    str(port),
                    "-o",
                    f"IdentityFile={keys}/client,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes",
                    f"root@127.0.0.1:{remote}",
                    str(mnt),
                ],
                capture_output=True,
            )
            if proc.returncode == 0:
                break
            time.sleep(0.1)
        else:
            pytest.skip(f"sshfs could not mount: {proc.stderr.decode().strip()}")
        yield mnt
    finally:
        subprocess.run(["fusermount", "-u", str(mnt)], capture_output=True)
        pid = (keys / "sshd.pid").read_text().strip() if (keys / "sshd.pid").exists() else ""
        if pid:
            subprocess.run(["kill", pid], capture_output=True)
