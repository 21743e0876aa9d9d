"""The manifests of one multi-node probe of a PersistentVolumeClaim, in one of two forms (`FORMS`).

- `job`: a headless Service whose DNS names the agents answer to, an Indexed Job of N agents (pod `i` is
  `NAME-agents-i.NAME-agents`, kept one per node by required pod anti-affinity on kubernetes.io/hostname), and a
  controller Job that runs `ckplan probe` over them. Nothing in a Job stops the agents when the controller is
  done, so each agent exits `LINGER` after the last probe connection it saw (`ckplan agent --linger`).
- `jobset`: one JobSet: a ReplicatedJob of N one-pod agent Jobs, exclusive per node (JobSet's
  exclusive-topology annotation), and one controller; the JobSet succeeds when the controller does, which ends
  the agents. Pod `j` is `NAME-agents-j-0.NAME-agents`.

Both forms run the same containers: the agent (`ckplan agent`, its node's and pod's names from the downward API,
a readiness probe on its info port that passes once fio's server listens) and the controller (`ckplan probe` with
`--hosts` in the hostlist syntax, `--agent-wait`, the agents' info port, labels naming the claim, and the plan
from a ConfigMap), which prints the profile between two marker lines for `kubectl logs` to fetch.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any, Literal

from ckplan.errors import InputError
from ckplan.k8s.request import ManifestRequest, toleration
from ckplan.schema import Model

AGENT_WAIT = "10m"  # the controller's wait for every agent: image pulls and scheduling
# an agent's wait after the last probe connection: the controller's handshake reaches an early agent and then
# leaves it alone until every agent answers (up to AGENT_WAIT), and its calibration runs without a connection
LINGER = "15m"
PROFILE_FILE = "ckplan-profile.json"  # in the working directory, /tmp
BEGIN = "----- BEGIN CKPLAN PROFILE -----"
END = "----- END CKPLAN PROFILE -----"
PLAN_DIR = "/etc/ckplan"
CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
HOSTNAME_KEY = "kubernetes.io/hostname"
# the controller: the probe's exit code is the pod's, and the profile (a failed late phase's too) is printed
CONTROLLER_SCRIPT = (
    f'ckplan probe "$@" --out {PROFILE_FILE}; rc=$?; '
    f'if [ -s {PROFILE_FILE} ]; then echo "{BEGIN}"; cat {PROFILE_FILE}; echo; echo "{END}"; fi; exit $rc'
)
# probe flags the manifests set themselves: given again after `--`, they would be ambiguous or lost in the pod
RESERVED_PROBE_FLAGS = (
    "--hosts",
    "--hosts-file",
    "--agent-wait",
    "--agent-info-port",
    "--drop-caches",
    "--plan",
    "--out",
    "--save",
    "--emit-jobs",
)


class Manifests(Model):
    """What `ckplan k8s` writes: the objects to apply, the controller's host list, and the commands that apply
    them, wait for the probe, fetch its profile, plan from it and delete them."""

    kind: Literal["ckplan.k8s"] = "ckplan.k8s"
    form: Literal["job", "jobset"]
    namespace: str
    hosts: str  # the controller's --hosts
    objects: list[dict[str, Any]]
    steps: list[str]


def manifests(request: ManifestRequest, probe_args: list[str] | tuple[str, ...] = ()) -> Manifests:
    """The manifests of `request`'s probe; `probe_args` are more `ckplan probe` flags for the controller."""
    for arg in probe_args:
        if arg.split("=", 1)[0] in RESERVED_PROBE_FLAGS:
            raise InputError(f"the manifests set {arg.split('=', 1)[0]} themselves: leave it out of the probe's flags")
    return FORMS[request.form](request, list(probe_args))


def _labels(request: ManifestRequest, component: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": "ckplan", "app.kubernetes.io/instance": request.name}
    return labels | ({"app.kubernetes.io/component": component} if component else {})


def _meta(request: ManifestRequest, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": request.namespace, "labels": _labels(request)}


def _resources(request: ManifestRequest) -> dict[str, Any]:
    amounts = {k: v for k, v in (("cpu", request.cpu), ("memory", request.memory)) if v is not None}
    return {"resources": {"requests": amounts, "limits": amounts}} if amounts else {}


def _pod_spec(request: ManifestRequest, container: dict[str, Any], **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", **more, "containers": [container]}
    if request.node_selector:
        spec["nodeSelector"] = dict(request.node_selector)
    if request.tolerations:
        spec["tolerations"] = [toleration(t) for t in request.tolerations]
    if request.service_account:
        spec["serviceAccountName"] = request.service_account
    volumes = [{"name": "target", "persistentVolumeClaim": {"claimName": request.claim}}]
    if request.plan is not None and container["name"] == "probe":
        volumes.append({"name": "plan", "configMap": {"name": f"{request.name}-plan"}})
    return spec | {"volumes": volumes}


def agent_pod(request: ManifestRequest, **more: Any) -> dict[str, Any]:
    """The agent's pod template: `ckplan agent` on every address, ready once fio's server listens."""
    container: dict[str, Any] = {
        "name": "agent",
        "image": request.image,
        "command": ["ckplan", "agent"],
        "args": ["--bind", "0.0.0.0", "--port", str(request.port), "--info-port", str(request.port + 1)]
        + ["--linger", LINGER],
        "workingDir": "/tmp",  # fio's server writes its jobs' command output in its working directory
        "env": [
            {"name": "CKPLAN_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "CKPLAN_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "fio", "containerPort": request.port, "protocol": "TCP"},
            {"name": "info", "containerPort": request.port + 1, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/", "port": "info"}, "periodSeconds": 5, "failureThreshold": 3},
        "volumeMounts": [{"name": "target", "mountPath": request.mount_path}],
        **_resources(request),
    }
    if request.drop_caches:  # /proc/sys/vm/drop_caches is read-only in an unprivileged container
        container["securityContext"] = {"privileged": True}
    return {"metadata": {"labels": _labels(request, "agent")}, "spec": _pod_spec(request, container, **more)}


def controller_args(request: ManifestRequest, hosts: str, probe_args: list[str]) -> list[str]:
    """`ckplan probe`'s arguments in the controller."""
    args = [request.mount_path, "--hosts", hosts, "--agent-wait", AGENT_WAIT]
    args += ["--agent-info-port", str(request.port + 1)]
    facts = {
        "kubernetes.form": request.form,
        "kubernetes.namespace": request.namespace,
        "kubernetes.claim": request.claim,
        "kubernetes.storage_class": request.storage_class,
        "kubernetes.csi_driver": request.csi_driver,
    }
    for key, value in facts.items():
        if value is not None:
            args += ["--label", f"{key}={value}"]
    if request.drop_caches:
        args.append("--drop-caches")
    if request.plan is not None:
        args += ["--plan", f"{PLAN_DIR}/plan.json"]
    return args + probe_args


def controller_pod(request: ManifestRequest, hosts: str, probe_args: list[str]) -> dict[str, Any]:
    mounts: list[dict[str, Any]] = [{"name": "target", "mountPath": request.mount_path}]
    if request.plan is not None:
        mounts.append({"name": "plan", "mountPath": PLAN_DIR, "readOnly": True})
    container = {
        "name": "probe",
        "image": request.image,
        "command": ["sh", "-c", CONTROLLER_SCRIPT, "ckplan-probe"],
        "args": controller_args(request, hosts, probe_args),
        "workingDir": "/tmp",
        "volumeMounts": mounts,
        **_resources(request),
    }
    return {"metadata": {"labels": _labels(request, "controller")}, "spec": _pod_spec(request, container)}


def _job_spec(request: ManifestRequest, template: dict[str, Any], pods: int = 1, **more: Any) -> dict[str, Any]:
    return {
        **more,
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 0,  # a probe is not retried: a pod that failed says why in its log
        "activeDeadlineSeconds": int(request.deadline_s),
        "template": template,
    }


def _plan_map(request: ManifestRequest) -> list[dict[str, Any]]:
    if request.plan is None:
        return []
    data = request.plan.model_dump_json()
    if len(data.encode()) > CONFIGMAP_LIMIT:
        raise InputError(
            f"‹plan› is {len(data.encode()):,} bytes as JSON, over a ConfigMap's {CONFIGMAP_LIMIT:,}: "
            "probe with a plan of fewer ranks, or without one"
        )
    meta = _meta(request, f"{request.name}-plan")
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"plan.json": data}}]


def _steps(request: ManifestRequest, done: str, logs: str, delete: str) -> list[str]:
    """The commands after the manifests: apply (server-side: a client-side apply copies the plan's ConfigMap into
    an annotation, which holds 256 KiB), wait until the probe has ended either way (`kubectl wait` takes one
    condition, and would wait for success until the deadline after a failure), fetch the profile between its
    markers (POSIX sed), plan from it, delete."""
    ns = f"-n {shlex.quote(request.namespace)}"
    markers = f"/^{BEGIN}$/,/^{END}$/{{//!p;}}"
    return [
        "kubectl apply --server-side -f ckplan-k8s.yaml",
        f"until kubectl {ns} get {done} | grep -q .; do sleep 10; done",
        f"kubectl {ns} logs {logs} | sed -n {shlex.quote(markers)} > profile.json",
        "ckplan recommend --storage profile.json",
        f"kubectl {ns} delete {delete}",
    ]


def job_form(request: ManifestRequest, probe_args: list[str]) -> Manifests:
    agents = f"{request.name}-agents"
    hosts = f"{agents}-[0-{request.nodes - 1}].{agents}:{request.port}"
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": _labels(request, "agent")}, "topologyKey": HOSTNAME_KEY}
            ]
        }
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(request, agents),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # the agents' names resolve before their readiness passes
            "selector": _labels(request, "agent"),
            "ports": [
                {"name": "fio", "port": request.port, "targetPort": request.port, "protocol": "TCP"},
                {"name": "info", "port": request.port + 1, "targetPort": request.port + 1, "protocol": "TCP"},
            ],
        },
    }
    agent_template = agent_pod(request, subdomain=agents, affinity=anti)
    agent_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(request, agents),
        "spec": _job_spec(request, agent_template, request.nodes, completionMode="Indexed"),
    }
    probe_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(request, f"{request.name}-probe"),
        "spec": _job_spec(request, controller_pod(request, hosts, probe_args)),
    }
    instance = f"app.kubernetes.io/name=ckplan,app.kubernetes.io/instance={request.name}"
    return Manifests(
        form="job",
        namespace=request.namespace,
        hosts=hosts,
        objects=[*_plan_map(request), service, agent_job, probe_job],
        steps=_steps(
            request,
            f"job/{request.name}-probe -o jsonpath='{{.status.succeeded}}{{.status.failed}}'",
            f"job/{request.name}-probe",
            f"job,service,configmap -l {instance}",
        ),
    )


def jobset_form(request: ManifestRequest, probe_args: list[str]) -> Manifests:
    agents = f"{request.name}-agents"
    hosts = f"{request.name}-agents-[0-{request.nodes - 1}]-0.{agents}:{request.port}"
    one_per_node = {"metadata": {"annotations": {EXCLUSIVE: HOSTNAME_KEY}}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(request, request.name),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": agents, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["probe"]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "agents",
                    "replicas": request.nodes,
                    "template": {**one_per_node, "spec": _job_spec(request, agent_pod(request))},
                },
                {
                    "name": "probe",
                    "replicas": 1,
                    "template": {"spec": _job_spec(request, controller_pod(request, hosts, probe_args))},
                },
            ],
        },
    }
    return Manifests(
        form="jobset",
        namespace=request.namespace,
        hosts=hosts,
        objects=[*_plan_map(request), jobset],
        steps=_steps(
            request,
            f"jobset/{request.name} -o jsonpath='{{.status.terminalState}}'",
            f"job/{request.name}-probe-0",  # JobSet names its Jobs JOBSET-REPLICATEDJOB-INDEX
            f"jobset/{request.name}" + (f" configmap/{request.name}-plan" if request.plan is not None else ""),
        ),
    )


FORMS: dict[str, Callable[[ManifestRequest, list[str]], Manifests]] = {"job": job_form, "jobset": jobset_form}


def as_yaml(result: Manifests) -> str:
    """The objects as one YAML stream, for `kubectl apply -f -`."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False, width=1_000_000) for o in result.objects)
