"""A shared network filesystem on one machine: a GlusterFS server and N client "nodes", each in its own
network namespace on one bridge, with shaped links (see docs/testbed.md).

    server namespace ckpt-srv (10.232.0.1): glusterd and 2 bricks (a distributed volume) on a tmpfs
    client namespaces ckpt-n1 … ckpt-nN (10.232.0.11 …): each its own FUSE client (mounted on
    /tmp/ckplan-testbed/mnt/nK, visible to the host; its traffic leaves through its namespace), and
    optionally a `ckplan agent` bound to its address
    the bridge ckpt-br (10.232.0.254: this host, so a probe here can reach the agents)

Rates, `tbf` in both directions: the server's port of the bridge (the aggregate limit: writes shaped on
the bridge's side of its veth, reads on the server's side) and each client's link (a node's NIC: writes on
the client's side, reads on the bridge's side).

Used as a context manager (`with testbed(nodes=4) as bed:`), as the pytest fixture in tests/test_testbed.py,
or from a shell:

    python scripts/_testbed.py up --nodes 4 --server-rate 400mbit --client-rate 100mbit [--agents]
    python scripts/_testbed.py down      # removes this testbed's leftovers by name, whatever made them

Needs root, network namespaces and FUSE; only one glusterd runs on a machine (its sockets are fixed paths
under /var/run), so the testbed refuses to start beside one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

try:  # beside it, as the benchmarks and `python scripts/_testbed.py` run it
    from _harness import processes
except ModuleNotFoundError:  # as scripts._testbed, as the tests import it
    from scripts._harness import processes

PREFIX = "ckpt-"
BRIDGE = "ckpt-br"
SERVER_NS = "ckpt-srv"
SUBNET = "10.232.0"
SERVER_ADDR = f"{SUBNET}.1"
HOST_ADDR = f"{SUBNET}.254"
VOLUME = "ckpt"
ROOT = Path("/tmp/ckplan-testbed")
SHARED = ROOT / "vol"  # the one path every node and this host see the volume at (see _agent)
STOCK_VOL = Path("/etc/glusterfs/glusterd.vol")
RUN_DIR = Path("/var/run/gluster")  # glusterd's run directory: fixed, whatever its working directory
START_ATTEMPTS = 3
MAX_NODES = 16
AGENT_PORT = 8765
MOUNT_ATTEMPTS = 3


class Unavailable(RuntimeError):
    """The testbed cannot run on this machine (not root, a filesystem not installed, no FUSE, another glusterd)."""


@dataclass
class Node:
    name: str  # its network namespace
    addr: str
    mount: Path
    pid: int = 0  # its FUSE client
    agent: subprocess.Popen | None = None

    def cmd(self, *argv: str) -> list[str]:
        """argv run in this node's network namespace (this host's mounts: the volume is visible)."""
        return ["nsenter", f"--net=/run/netns/{self.name}", *argv]


@dataclass
class Testbed:
    server_rate: str
    client_rate: str
    nodes: list[Node] = field(default_factory=list)
    fs: str = "glusterfs"
    server_addr: str = SERVER_ADDR
    root: Path = ROOT
    path: Path = SHARED  # the volume, as every node's agent and this host see it
    s3_endpoint: str | None = None  # Ceph's RADOS Gateway beside CephFS (up(rgw=True)), keys RGW_ACCESS_KEY/SECRET

    @property
    def agents(self) -> list[str]:
        return [f"{n.addr}:{AGENT_PORT}" for n in self.nodes if n.agent is not None]

    def describe(self) -> dict:
        return {
            "fs": self.fs,
            "server": self.server_addr,
            "path": str(self.path),
            "server_rate": self.server_rate,
            "client_rate": self.client_rate,
            "nodes": [{"netns": n.name, "addr": n.addr, "mount": str(n.mount), "fuse_pid": n.pid} for n in self.nodes],
            "agents": self.agents,
            "s3_endpoint": self.s3_endpoint,
        }


def _sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)}: exit {result.returncode}: {result.stderr.strip() or result.stdout.strip()}"
        )
    return result


def rate_bits(rate: str) -> int:
    """'400mbit', '1gbit', '100000kbit' → bits per second (tc's units; bare numbers are bit/s)."""
    text = rate.strip().lower()
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3), ("bit", 1)):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * mult)
    return int(float(text))


def _shape(dev: str, rate: str, netns: str | None = None) -> None:
    """tbf on `dev`'s egress: a 10 ms bucket (at least 128 KiB, so a 64 KiB GSO packet passes whole)."""
    burst = max(rate_bits(rate) // 8 // 100, 128 * 1024)
    ns = ["-n", netns] if netns else []
    _sh("tc", *ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms")


def leftoverprocesses() -> list[int]:
    """Processes this testbed starts: the filesystems' daemons and FUSE clients naming our paths or server, agents
    bound to our subnet, fio servers on it."""
    mine = []
    for pid, comm, argv in processes():
        text = " ".join(argv)
        if pid == os.getpid():
            continue
        if (
            any(fs.owns(comm, text) for fs in FILESYSTEMS.values())
            or "agent" in argv
            and f"{SUBNET}." in text
            and "--bind" in text
            or comm == "fio"
            and f"--server=ip:{SUBNET}." in text
        ):
            mine.append(pid)
    return mine


def leftover_mounts() -> list[str]:
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    return [p for p in points if p == str(ROOT) or p.startswith(str(ROOT) + "/")]


def leftover_namespaces() -> list[str]:
    out = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def leftover_links() -> list[str]:
    out = _sh("ip", "-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n.startswith(PREFIX)]


def leftovers() -> dict[str, list]:
    """What down() removes; every list empty after a clean teardown."""
    return {
        "processes": leftoverprocesses(),
        "mounts": leftover_mounts(),
        "namespaces": leftover_namespaces(),
        "links": leftover_links(),
        "scratch": [str(ROOT)] if ROOT.exists() else [],
    }


def down() -> None:
    """Remove everything of a testbed by name: FUSE mounts, processes, namespaces, links, the scratch dir.
    Safe to run when nothing is up; raises if something survives."""
    for point in sorted(leftover_mounts(), key=len, reverse=True):
        if _sh("umount", point, check=False).returncode != 0:
            _sh("umount", "-l", point, check=False)
    deadline = time.monotonic() + 10
    while (left := leftoverprocesses()) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for ns in leftover_namespaces():
        _sh("ip", "netns", "del", ns, check=False)
    for link in leftover_links():
        _sh("ip", "link", "del", link, check=False)
    for point in sorted(leftover_mounts(), key=len, reverse=True):
        _sh("umount", "-l", point, check=False)
    for fs in FILESYSTEMS.values():
        fs.clean()
    if ROOT.exists() and not leftover_mounts():
        shutil.rmtree(ROOT, ignore_errors=True)
    remaining = {k: v for k, v in leftovers().items() if v}
    if remaining:
        raise RuntimeError(f"testbed teardown left {remaining}")


def check_available(fs: str = "glusterfs") -> None:
    if os.geteuid() != 0:
        raise Unavailable("the testbed needs root (namespaces, tc, mounts)")
    if fs not in FILESYSTEMS:
        raise ValueError(f"fs must be one of {', '.join(FILESYSTEMS)}, not {fs!r}")
    for exe in ("nsenter", "tc", "ip", *FILESYSTEMS[fs].executables):
        if shutil.which(exe) is None:
            raise Unavailable(f"{exe} is not installed (scripts/setup --test-tools installs it)")
    if not os.path.exists("/dev/fuse"):
        raise Unavailable("no /dev/fuse")
    FILESYSTEMS[fs].check()


def _veth(host_side: str, netns: str, addr: str) -> None:
    _sh("ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _sh("ip", "link", "set", host_side, "master", BRIDGE)
    _sh("ip", "link", "set", host_side, "up")
    _sh("ip", "-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0")
    _sh("ip", "-n", netns, "link", "set", "eth0", "up")
    _sh("ip", "-n", netns, "link", "set", "lo", "up")


def _wait_port(netns: str, addr: str, port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {addr}:{port} ({netns}) after {timeout:.0f} s")


def _in_server(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return _sh("nsenter", f"--net=/run/netns/{SERVER_NS}", *argv, check=check, timeout=timeout)


class Filesystem:
    """One shared filesystem the testbed can serve: its daemons in the server's namespace, a node's FUSE client."""

    name: str
    mount_type: str  # as /proc/mounts names it
    executables: tuple[str, ...]

    def check(self) -> None:
        """Refuse (Unavailable) what would stop it running here."""

    def owns(self, comm: str, text: str) -> bool:
        """Whether a process (its comm, its argv joined) is one this filesystem's testbed started."""
        raise NotImplementedError

    def serve(self, size: str) -> None:
        """Its daemons, up in the server's namespace on SERVER_ADDR, their data on at most `size` of memory."""
        raise NotImplementedError

    def start_client(self, node: Node, log: Path, pidfile: Path) -> None:
        """Start the node's FUSE client on node.mount, from the node's namespace; it writes its pid to pidfile."""
        raise NotImplementedError

    def clean(self) -> None:
        """Remove what its killed processes leave outside ROOT."""


class GlusterFS(Filesystem):
    """glusterd and a distributed volume over 2 bricks on a tmpfs; only one glusterd runs on a machine."""

    name, mount_type = "glusterfs", "fuse.glusterfs"
    executables = ("glusterd", "gluster", "glusterfs")

    def check(self) -> None:
        others = [pid for pid, comm, _ in processes() if comm == "glusterd"]
        if others:
            raise Unavailable(
                f"a glusterd is already running (pid {', '.join(map(str, others))}): only one can run on a machine "
                "(its sockets are fixed paths under /var/run); stop it, or run `python scripts/_testbed.py down` if "
                "it is a testbed's leftover"
            )

    def owns(self, comm: str, text: str) -> bool:
        return comm.startswith("gluster") and (str(ROOT) in text or SERVER_ADDR in text)

    @staticmethod
    def cli(*args: str) -> str:
        # the CLI talks to glusterd over its unix socket (/var/run/glusterd.socket); --mode=script: no prompts
        return _in_server("gluster", "--mode=script", *args).stdout

    def serve(self, size: str) -> None:
        workdir, bricks = ROOT / "glusterd", ROOT / "bricks"
        for d in (workdir, bricks):
            d.mkdir(parents=True)
        _sh("mount", "-t", "tmpfs", "-o", f"size={size}", "ckpt-bricks", str(bricks))
        vol = STOCK_VOL.read_text().replace("/var/lib/glusterd", str(workdir))
        assert str(workdir) in vol, f"{STOCK_VOL} has no working-directory /var/lib/glusterd to replace"
        (ROOT / "glusterd.vol").write_text(vol)
        # glusterd daemonises; its bricks (glusterfsd) name ROOT in their command lines, which is how down() finds
        # them
        _in_server("glusterd", "-f", str(ROOT / "glusterd.vol"), "-p", str(ROOT / "glusterd.pid"), "-l",
                   str(ROOT / "log" / "glusterd.log"))  # fmt: skip
        _wait_port(SERVER_NS, SERVER_ADDR, 24007)
        deadline = time.monotonic() + 20
        while _in_server("gluster", "--mode=script", "volume", "list", check=False).returncode != 0:
            if time.monotonic() > deadline:  # the CLI's socket appears a moment after the port
                raise RuntimeError("glusterd does not answer its CLI")
            time.sleep(0.2)
        self.cli("volume", "create", VOLUME, "transport", "tcp", f"{SERVER_ADDR}:{bricks}/b1",
                 f"{SERVER_ADDR}:{bricks}/b2", "force")  # fmt: skip
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                # force: start the bricks that did not start, where an attempt before started some
                self.cli("volume", "start", VOLUME, *(["force"] if attempt > 1 else []))
                break
            except RuntimeError as exc:
                if attempt == START_ATTEMPTS:
                    raise RuntimeError(f"{exc}; {_log_tails()}") from None
                time.sleep(1)
        self._wait_bricks()

    def _wait_bricks(self, timeout: float = 60) -> None:
        """Until every brick is online and takes connections: a client mounted before that can stay unconnected
        (its every lookup "Transport endpoint is not connected"), as one did in CI right after a teardown."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = ElementTree.fromstring(self.cli("volume", "status", VOLUME, "--xml"))
            bricks = [n for n in doc.iter("node") if (n.findtext("path") or "").startswith(str(ROOT))]
            ports = [int(n.findtext("port") or 0) for n in bricks if n.findtext("status") == "1"]
            if len(bricks) == 2 and len(ports) == 2 and all(ports):
                with contextlib.suppress(RuntimeError):
                    for port in ports:
                        _wait_port(SERVER_NS, SERVER_ADDR, port, timeout=2)
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the volume's bricks are not all online after {timeout:.0f} s; {_log_tails()}")

    def start_client(self, node: Node, log: Path, pidfile: Path) -> None:
        _sh(*node.cmd("glusterfs", f"--volfile-server={SERVER_ADDR}", f"--volfile-id={VOLUME}", f"--log-file={log}",
                      f"--pid-file={pidfile}", str(node.mount)))  # fmt: skip

    def clean(self) -> None:
        # a killed brick leaves its socket, named by a hash of the brick's path, so the next testbed's brick of
        # the same path finds it: remove those no live socket is bound to
        with open("/proc/net/unix") as f:
            bound = {line.split()[-1] for line in f if line.rstrip().endswith(".socket")}
        for sock in RUN_DIR.glob("*.socket"):
            if str(sock) not in bound:
                with contextlib.suppress(OSError):
                    sock.unlink()
        # and its pid file, whose pid another process may have by the next bring-up: glusterd would take that
        # brick for running and fail the volume's start
        for pidfile in (RUN_DIR / "vols" / VOLUME).glob("*.pid"):
            with contextlib.suppress(OSError):
                pidfile.unlink()


class CephFS(Filesystem):
    """A one-host Ceph cluster (a monitor, one OSD on memstore: its data in memory, a metadata server) and
    ceph-fuse clients; authentication off. Its separate metadata server, like Lustre's MDS, serves every
    create and open."""

    name, mount_type = "cephfs", "fuse.ceph-fuse"
    executables = ("ceph", "ceph-mon", "ceph-osd", "ceph-mds", "ceph-fuse", "monmaptool")
    MON_PORT = 6789

    @property
    def conf(self) -> Path:
        return ROOT / "ceph" / "ceph.conf"

    def owns(self, comm: str, text: str) -> bool:
        return (comm.startswith("ceph") or comm == "radosgw") and str(ROOT) in text

    def cli(self, *args: str) -> str:
        return _in_server("ceph", "-c", str(self.conf), *args).stdout

    def serve(self, size: str) -> None:
        try:
            self._serve(size)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; {_log_tails()}") from None

    def _serve(self, size: str) -> None:
        import uuid

        top = ROOT / "ceph"
        for d in ("mon/a", "osd/0", "mds/a", "run"):
            (top / d).mkdir(parents=True)
        fsid = uuid.uuid4()
        # messenger v1 only, on one address; pools of one replica on one OSD (crush on OSDs, not hosts); every
        # daemon's and client's socket, pid file and log under ROOT, so that down() finds them by path
        self.conf.write_text(
            "[global]\n"
            f"fsid = {fsid}\nmon host = {SERVER_ADDR}:{self.MON_PORT}\npublic addr = {SERVER_ADDR}\n"
            "auth cluster required = none\nauth service required = none\nauth client required = none\n"
            "ms bind msgr2 = false\nms mon client mode = crc secure\n"
            f"osd objectstore = memstore\nmemstore device bytes = {_size_bytes(size)}\n"
            "osd pool default size = 1\nosd pool default min size = 1\nmon allow pool size one = true\n"
            "osd crush chooseleaf type = 0\nmon warn on pool no redundancy = false\n"
            f"run dir = {top / 'run'}\nadmin socket = {top / 'run'}/$name.asok\npid file = {top / 'run'}/$name.pid\n"
            f"log file = {ROOT / 'log'}/$name.log\n"
            f"mon data = {top}/mon/$id\nosd data = {top}/osd/$id\nmds data = {top}/mds/$id\n"
            "client oc size = 67108864\n"  # the client's object cache: 64 MiB, not 200, for 16 clients' memory
        )
        conf = ["-c", str(self.conf)]
        _sh("monmaptool", "--create", "--add", "a", f"{SERVER_ADDR}:{self.MON_PORT}", "--fsid", str(fsid),
            str(top / "monmap"))  # fmt: skip
        _in_server("ceph-mon", *conf, "--mkfs", "-i", "a", "--monmap", str(top / "monmap"))
        _in_server("ceph-mon", *conf, "-i", "a")
        _wait_port(SERVER_NS, SERVER_ADDR, self.MON_PORT)
        osd_uuid = str(uuid.uuid4())  # the OSD's own, given to both, so that the monitor knows the OSD that starts
        osd = self.cli("osd", "create", osd_uuid).strip()
        _in_server("ceph-osd", *conf, "-i", osd, "--mkfs", "--osd-uuid", osd_uuid)
        for attempt in range(1, START_ATTEMPTS + 1):
            # seen here in 1 of 4 bring-ups: the OSD sends its first command before it has the monitor's map, with
            # a zero fsid, is refused ('wrong fsid') and exits; started again, it has it
            started = _in_server("ceph-osd", *conf, "-i", osd, check=attempt == START_ATTEMPTS)
            if started.returncode == 0:
                break
            time.sleep(0.5)
        _in_server("ceph-mds", *conf, "-i", "a")
        for pool in ("cephfs_data", "cephfs_metadata"):
            self.cli("osd", "pool", "create", pool, "16")
        self.cli("fs", "new", "cephfs", "cephfs_metadata", "cephfs_data")
        deadline = time.monotonic() + 60
        while not self._active():
            if time.monotonic() > deadline:
                raise RuntimeError(f"CephFS has no active metadata server or OSD after 60 s; {_log_tails()}")
            time.sleep(0.3)

    def serve_s3(self) -> str:
        """Ceph's RADOS Gateway, a real S3 server, on the server's address (through its shaped port), with one
        user whose keys are RGW_ACCESS_KEY and RGW_SECRET_KEY; its endpoint URL once it answers."""
        # RGW makes 6 pools at its start: of 8 placement groups each they fit one OSD's limit beside CephFS's
        self.cli("config", "set", "global", "osd_pool_default_pg_num", "8")
        self.cli("config", "set", "global", "osd_pool_default_pgp_num", "8")
        (ROOT / "ceph" / "rgw").mkdir()
        self.start_rgw()
        _in_server("radosgw-admin", "-c", str(self.conf), "user", "create", "--uid=ckplan", "--display-name=ckplan",
                   f"--access-key={RGW_ACCESS_KEY}", f"--secret-key={RGW_SECRET_KEY}")  # fmt: skip
        return f"http://{SERVER_ADDR}:{RGW_PORT}"

    def start_rgw(self) -> None:
        """Start (or start again, after a test killed it) the gateway; return once it takes connections."""
        endpoint = f"beast endpoint={SERVER_ADDR}:{RGW_PORT}"
        _in_server("radosgw", "-c", str(self.conf), "-n", "client.rgw.a", "--rgw-frontends", endpoint,
                   "--rgw-data", str(ROOT / "ceph" / "rgw"), "--log-file", str(ROOT / "log" / "rgw.log"))  # fmt: skip
        _wait_port(SERVER_NS, SERVER_ADDR, RGW_PORT, timeout=60)

    def rgw_admin(self, *args: str) -> str:
        return _in_server("radosgw-admin", "-c", str(self.conf), *args).stdout

    def rgw_pids(self) -> list[int]:
        return [pid for pid, comm, argv in processes() if comm == "radosgw" and str(ROOT) in " ".join(argv)]

    def _active(self) -> bool:
        fs = json.loads(self.cli("fs", "dump", "--format=json"))["filesystems"]
        osds = json.loads(self.cli("osd", "dump", "--format=json"))["osds"]
        mds = [i["state"] for f in fs for i in f["mdsmap"]["info"].values()]
        return "up:active" in mds and any(o["up"] and o["in"] for o in osds)

    def start_client(self, node: Node, log: Path, pidfile: Path) -> None:
        _sh(*node.cmd("ceph-fuse", "-c", str(self.conf), "--id", node.name, f"--log-file={log}",
                      f"--pid-file={pidfile}", str(node.mount)))  # fmt: skip


RGW_PORT = 7480
RGW_ACCESS_KEY, RGW_SECRET_KEY = "CKPLANTESTBEDKEY", "ckplan-testbed-secret"


def _size_bytes(size: str) -> int:
    """'4g', '512m' (tmpfs's units, powers of 2) → bytes."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = size.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


CEPHFS = CephFS()
FILESYSTEMS: dict[str, Filesystem] = {fs.name: fs for fs in (GlusterFS(), CEPHFS)}


def _log_tails(lines: int = 8) -> str:
    """The last lines of glusterd's and the bricks' logs, for an error that says only 'see the log'."""
    tails = []
    for log in sorted((ROOT / "log").rglob("*.log")):
        with contextlib.suppress(OSError):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"{log.name}: " + " | ".join(tail))
    return "; ".join(tails) or f"no logs under {ROOT / 'log'}"


def _client(n: int, client_rate: str, fs: Filesystem) -> Node:
    node = Node(f"{PREFIX}n{n}", f"{SUBNET}.{10 + n}", ROOT / "mnt" / f"n{n}")
    _sh("ip", "netns", "add", node.name)
    _veth(f"{PREFIX}v{n}", node.name, node.addr)
    _shape("eth0", client_rate, node.name)  # the node's writes
    _shape(f"{PREFIX}v{n}", client_rate)  # its reads
    node.mount.mkdir(parents=True)
    pidfile, log = ROOT / f"fuse-n{n}.pid", ROOT / "log" / f"fuse-n{n}.log"
    for _ in range(MOUNT_ATTEMPTS):
        fs.start_client(node, log, pidfile)
        deadline = time.monotonic() + 20
        while str(node.mount) not in leftover_mounts() or not os.path.ismount(node.mount):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        else:
            node.pid = int(pidfile.read_text().strip())
            return node
        # seen here once, in a bring-up right after a teardown: a client that never mounts; start a fresh one
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
        _sh("umount", "-l", str(node.mount), check=False)
    tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    raise RuntimeError(f"{node.mount} did not mount in {MOUNT_ATTEMPTS} attempts; its client's log ends: {tail}")


def _agent(node: Node, ckplan: list[str]) -> None:
    # fio names one directory for every host, as nodes mount one filesystem at one path: each agent runs in a
    # mount namespace of its own where its node's FUSE mount lies over SHARED, so its writes travel through its
    # node's client and link (the namespace goes with the agent)
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    node.agent = subprocess.Popen(
        node.cmd(
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(node.mount),
            str(SHARED),
            *ckplan,
            "agent",
            "--bind",
            node.addr,
            "--port",
            str(AGENT_PORT),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(ROOT),
        start_new_session=True,
    )
    _wait_port(node.name, node.addr, AGENT_PORT)


def ckplan_exe() -> list[str]:
    exe = shutil.which("ckplan", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    return [exe] if exe else [sys.executable, "-m", "ckplan"]


def up(
    nodes: int = 4,
    server_rate: str = "400mbit",
    client_rate: str = "100mbit",
    agents: bool = False,
    brick_size: str = "4g",
    fs: str = "glusterfs",
    rgw: bool = False,
) -> Testbed:
    """Bring the testbed up (see the module's docstring); on any failure, tear down what was made and raise.
    With `rgw` (CephFS only), Ceph's RADOS Gateway serves S3 from the same cluster (Testbed.s3_endpoint)."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be 1 to {MAX_NODES}, not {nodes}")
    if rgw and fs != "cephfs":
        raise ValueError("the RADOS Gateway runs on the CephFS testbed's cluster: give fs='cephfs'")
    check_available(fs)
    for exe in ("radosgw", "radosgw-admin") if rgw else ():
        if shutil.which(exe) is None:
            raise Unavailable(f"{exe} is not installed (scripts/setup --test-tools installs it)")
    if any(leftovers().values()):
        raise Unavailable(f"a testbed is already up or left over: {leftovers()}; run `python scripts/_testbed.py down`")
    served = FILESYSTEMS[fs]
    bed = Testbed(server_rate, client_rate, fs=fs)
    try:
        (ROOT / "log").mkdir(parents=True)
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "addr", "add", f"{HOST_ADDR}/24", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        _sh("ip", "netns", "add", SERVER_NS)
        _veth(f"{PREFIX}vs", SERVER_NS, SERVER_ADDR)
        served.serve(brick_size)
        if rgw:
            bed.s3_endpoint = CEPHFS.serve_s3()
        _shape(f"{PREFIX}vs", server_rate)  # towards the server: every node's writes, together
        _shape("eth0", server_rate, SERVER_NS)  # from the server: every node's reads
        for n in range(1, nodes + 1):
            bed.nodes.append(_client(n, client_rate, served))
        SHARED.mkdir()
        _sh("mount", "--bind", str(bed.nodes[0].mount), str(SHARED))  # this host sees it through node 1's client
        if agents:
            exe = ckplan_exe()
            for node in bed.nodes:
                _agent(node, exe)
        return bed
    except BaseException:
        down()
        raise


@contextlib.contextmanager
def testbed(**kwargs) -> Iterator[Testbed]:
    """up(**kwargs), then down() however the body ends."""
    bed = up(**kwargs)
    try:
        yield bed
    finally:
        for node in bed.nodes:
            if node.agent is not None and node.agent.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.agent.pid, signal.SIGKILL)
                node.agent.wait()
        down()


def fuse_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/_testbed.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="bring a testbed up and leave it running (print its description as JSON)")
    p_up.add_argument("--nodes", type=int, default=4)
    p_up.add_argument("--server-rate", default="400mbit")
    p_up.add_argument("--client-rate", default="100mbit")
    p_up.add_argument("--agents", action="store_true", help="a `ckplan agent` on each node, port 8765")
    p_up.add_argument("--brick-size", default="4g", help="the bricks' tmpfs size (cephfs: the OSD's memstore)")
    p_up.add_argument("--fs", choices=sorted(FILESYSTEMS), default="glusterfs")
    p_up.add_argument("--rgw", action="store_true", help="cephfs: also Ceph's RADOS Gateway, a real S3 server")
    sub.add_parser("down", help="remove a testbed's namespaces, mounts, processes and scratch dir")
    sub.add_parser("status", help="print what of a testbed is up (JSON)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            start = time.monotonic()
            bed = up(args.nodes, args.server_rate, args.client_rate, args.agents, args.brick_size, args.fs, args.rgw)
            print(json.dumps({**bed.describe(), "up_s": round(time.monotonic() - start, 2)}, indent=2))
            if args.agents:
                # the agents are this process's children: they are started in sessions of their own and outlive it
                print("agents run on; `python scripts/_testbed.py down` stops them", file=sys.stderr)
        elif args.command == "down":
            down()
        else:
            print(json.dumps(leftovers(), indent=2))
    except (Unavailable, RuntimeError, ValueError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
