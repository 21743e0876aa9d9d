"""Where each agent runs: `ckplan agent --info-port` answers `GET /` with an `AgentInfo` (its node's name, its
pod's where Kubernetes gave one), and a multi-host probe given `--agent-info-port` asks every host for it, so that
its profile maps each host it drove to a node. fio's protocol cannot carry this: its client expands `${VAR}` in a
job file before sending it (checked with fio 3.33), and a server's reply names only the server's own hostname,
which in a pod is the pod's.

The agent's side (ckplan/agent.py) serves it; this module holds the model and the probe's client, which reads at
most MAX_REPLY bytes of a reply and nothing it does not validate.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

from pydantic import Field, ValidationError

from ckplan.errors import EnvironmentProblem
from ckplan.probe import hostlist
from ckplan.profile import HostPlacement, NodeName
from ckplan.schema import Model

ENV_NODE = "CKPLAN_NODE_NAME"  # the manifests set it from the downward API's spec.nodeName
ENV_POD = "CKPLAN_POD_NAME"  # and this from metadata.name
MAX_REPLY = 64 * 1024
ASK_TIMEOUT_S = 5.0  # per host, for the connection and the whole reply
ASKED_AT_ONCE = 32
NAMED_HOSTS = 5


class AgentInfo(Model):
    """What an agent says about itself: the node it runs on (Kubernetes' node name, Slurm's, else the host's
    name), its pod where it runs in one, whether its fio server listens yet, and the versions."""

    node: NodeName
    pod: NodeName | None = None
    fio_port: Annotated[int, Field(ge=1, le=65535)]
    ready: bool
    ckplan_version: str


def own_info(fio_port: int, ready: bool, environ: Mapping[str, str] | None = None) -> AgentInfo:
    """This agent's info: the node from CKPLAN_NODE_NAME, else SLURMD_NODENAME, else the host's name."""
    from ckplan.version import __version__

    environ = os.environ if environ is None else environ
    node = next((environ[v].strip() for v in (ENV_NODE, "SLURMD_NODENAME") if environ.get(v, "").strip()), "")
    pod = environ.get(ENV_POD, "").strip() or None
    return AgentInfo(
        node=node or socket.gethostname(), pod=pod, fio_port=fio_port, ready=ready, ckplan_version=__version__
    )


def ask(host: hostlist.Host, port: int) -> AgentInfo:
    """Host's agent info from its info port, within ASK_TIMEOUT_S in all; an OSError or ValueError says why not."""
    import time

    deadline = time.monotonic() + ASK_TIMEOUT_S
    conn = http.client.HTTPConnection(host.name, port, timeout=ASK_TIMEOUT_S)
    try:
        conn.request("GET", "/", headers={"Accept": "application/json"})
        reply = conn.getresponse()
        body = b""
        while len(body) <= MAX_REPLY and (chunk := reply.read1(MAX_REPLY + 1 - len(body))):
            body += chunk
            if time.monotonic() > deadline:  # a reply trickled a byte at a time would hold the probe
                raise ValueError(f"its reply took over {ASK_TIMEOUT_S:g} s")
    finally:
        conn.close()
    if len(body) > MAX_REPLY:
        raise ValueError(f"its reply is over {MAX_REPLY:,} bytes")
    try:
        info = AgentInfo.model_validate(json.loads(body))
    except (ValidationError, ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"HTTP {reply.status}, not a ckplan agent's info") from None
    if info.fio_port != host.port:
        raise ValueError(f"its agent runs fio's server on port {info.fio_port}, not {host.port}")
    return info


def placements(hosts: list[hostlist.Host], port: int) -> list[HostPlacement]:
    """Every host's placement, asked at once; an EnvironmentProblem naming the hosts whose agent did not answer."""

    def one(host: hostlist.Host) -> HostPlacement | str:
        try:
            info = ask(host, port)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return f"{host} ({str(exc) or type(exc).__name__})"
        return HostPlacement(host=str(host), node=info.node, pod=info.pod)

    with ThreadPoolExecutor(min(ASKED_AT_ONCE, max(1, len(hosts)))) as pool:
        found = list(pool.map(one, hosts))
    failed = [f for f in found if isinstance(f, str)]
    if failed:
        more = f" and {len(failed) - NAMED_HOSTS:,} more" if len(failed) > NAMED_HOSTS else ""
        raise EnvironmentProblem(
            f"agent info port {port}: no agent info from {', '.join(failed[:NAMED_HOSTS])}{more} "
            "(start each agent with `ckplan agent --info-port PORT`)"
        )
    return [f for f in found if isinstance(f, HostPlacement)]
