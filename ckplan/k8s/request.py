"""What `ckplan k8s` is asked for: a `ManifestRequest`, each input declared once with its flag, help and bounds.

Kubernetes' own rules are checked here, where the API server would refuse the manifests later and far from the
typo: names are DNS-1123 labels (RFC 1123: at most 63 lower-case letters, digits and '-', starting and ending
alphanumeric), a claim's or a service account's name a DNS-1123 subdomain, label keys and values, taints'
effects, resource quantities. The generated names are checked too: an Indexed Job's pod hostname is
`JOB-INDEX`, and a JobSet's `JOBSET-agents-INDEX-0`, each a label.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator

from ckplan.errors import InputError
from ckplan.inputs import Flag, parsed
from ckplan.request import plan_input
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import MAX_HOSTS, parse_duration
from ckplan.version import __version__

DEFAULT_IMAGE = f"ckplan:{__version__}"  # what the Containerfile builds (docs/kubernetes.md)
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # RFC 1123: a namespace
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # a Service's name, and what JobSet names from ours
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
PANEL = "Kubernetes"


def check_label(name: str, what: str) -> str:
    if len(name) > 63 or not LABEL.fullmatch(name):
        raise InputError(
            f"{what} {name!r} is not a DNS label (at most 63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return name


def check_subdomain(name: str, what: str) -> str:
    if len(name) > 253 or not SUBDOMAIN.fullmatch(name) or any(len(p) > 63 for p in name.split(".")):
        raise InputError(f"{what} {name!r} is not a DNS subdomain (lower-case labels joined by '.', at most 253)")
    return name


def check_label_key(key: str, what: str) -> str:
    """A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix:
        check_subdomain(prefix, f"{what}'s prefix")
    if len(name) > 63 or not name or not LABEL_VALUE.fullmatch(name):
        raise InputError(f"{what} {key!r} is not a label key ([prefix/]name, the name at most 63 characters)")
    return key


def _label(name: str, info: Any) -> str:
    return check_label(name, f"‹{info.field_name}›")


def _object_name(name: str) -> str:
    if len(name) > 63 or not DNS_1035.fullmatch(name):
        raise InputError(
            f"‹name› {name!r} is not a DNS-1035 label (at most 63 lower-case letters, digits and '-', starting "
            "with a letter, ending with a letter or digit): the Service and the pods' hostnames are named from it"
        )
    return name


def _subdomain(name: str | None, info: Any) -> str | None:
    return None if name is None else check_subdomain(name, f"‹{info.field_name}›")


# where the image keeps what its pods need (ckplan in /opt, the plan's ConfigMap in /etc, the working directory
# /tmp) and the kernel's own: a claim mounted there would hide it, or put the pods' own files on the claim
SYSTEM_DIRS = ("bin", "boot", "dev", "etc", "lib", "lib64", "opt", "proc", "run", "sbin", "sys", "tmp", "usr")


def _mount_path(path: str) -> str:
    pure = PurePosixPath(path)
    if not pure.is_absolute():
        raise InputError(f"‹mount_path› must be an absolute path in the pods, got {path!r}")
    if ".." in pure.parts or ":" in path or not path.isprintable() or pure == PurePosixPath("/"):
        raise InputError(f"‹mount_path› {path!r} must be a directory below / without '..' or ':'")
    if pure.parts[1] in SYSTEM_DIRS:
        raise InputError(
            f"‹mount_path› {path!r} is under /{pure.parts[1]}, which the image or the kernel uses: mount the "
            "claim elsewhere (/ckpt, /mnt/ckpt, /data)"
        )
    return str(pure)


def _image(image: str) -> str:
    if not IMAGE.fullmatch(image):
        raise InputError(f"‹image› {image!r} is not an image reference (registry/name:tag or @digest)")
    return image


def _selector(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_label_key(key, "‹node_selector› key")
        if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            raise InputError(f"‹node_selector› {key}={value!r}: a label value is at most 63 letters, digits, -_.")
    return labels


def toleration(text: str) -> dict[str, str]:
    """kubectl's taint syntax as the toleration of it: key=value:Effect (Equal), key:Effect or key (Exists)."""
    spec, _, effect = text.partition(":")
    key, eq, value = spec.partition("=")
    if effect and effect not in EFFECTS:
        raise InputError(f"‹tolerations› {text!r}: the effect must be one of {', '.join(EFFECTS)}")
    check_label_key(key, "‹tolerations› key")
    if eq and (len(value) > 63 or not value or not LABEL_VALUE.fullmatch(value)):
        raise InputError(f"‹tolerations› {text!r}: the value is not a label value")
    out = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def _tolerations(items: list[str]) -> list[str]:
    for item in items:
        toleration(item)
    return items


def _quantity(value: str | None, info: Any) -> str | None:
    if value is not None and not QUANTITY.fullmatch(value):
        raise InputError(f"‹{info.field_name}› {value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
    return value


class ManifestRequest(Model):
    """The manifests of one probe of a PersistentVolumeClaim from `nodes` nodes: what they run and where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: Annotated[
        int, Field(ge=1, le=MAX_HOSTS), Flag("--nodes", "Agents, one per node, that write at once.", panel=None)
    ]
    claim: Annotated[
        str,
        AfterValidator(_subdomain),
        Flag("--claim", "The PersistentVolumeClaim to probe (ReadWriteMany), mounted in every pod.", panel=None),
    ]
    mount_path: Annotated[
        str, AfterValidator(_mount_path), Flag("--mount-path", "Where the pods mount the claim.", "/ckpt", None)
    ] = "/ckpt"
    form: Annotated[
        Literal["job", "jobset"],
        Flag(
            "--form",
            "job: a headless Service, an Indexed Job of agents and a controller Job; jobset: one JobSet "
            "(needs the JobSet controller).",
            "job",
            None,
        ),
    ] = "job"
    name: Annotated[
        str,
        AfterValidator(_object_name),
        Flag("--name", "Prefix of every object's name (NAME-agents, NAME-probe).", "ckplan", PANEL),
    ] = "ckplan"
    namespace: Annotated[str, AfterValidator(_label), Flag("--namespace", "Namespace.", "default", PANEL)] = "default"
    image: Annotated[
        str,
        AfterValidator(_image),
        Flag("--image", "The ckplan image (Containerfile).", DEFAULT_IMAGE, PANEL),
    ] = DEFAULT_IMAGE
    node_selector: Annotated[
        dict[str, str],
        AfterValidator(_selector),
        Flag("--node-selector", "Run the pods on nodes with this label. Repeatable.", None, PANEL, metavar="KEY=VALUE"),
    ] = {}
    tolerations: Annotated[
        list[str],
        AfterValidator(_tolerations),
        Flag(
            "--toleration",
            "Tolerate a taint, in kubectl's syntax: key=value:NoSchedule, key:NoExecute, key. Repeatable.",
            None,
            PANEL,
            metavar="TAINT",
        ),
    ] = []
    cpu: Annotated[
        str | None,
        AfterValidator(_quantity),
        Flag("--cpu", "CPU each pod requests and is limited to, e.g. 4.", None, PANEL),
    ] = None
    memory: Annotated[
        str | None,
        AfterValidator(_quantity),
        Flag("--memory", "Memory each pod requests and is limited to, e.g. 16Gi.", None, PANEL),
    ] = None
    service_account: Annotated[
        str | None,
        AfterValidator(_subdomain),
        Flag("--service-account", "The pods' service account.", None, PANEL),
    ] = None
    drop_caches: Annotated[
        bool,
        Flag(
            "--drop-caches",
            "Run the agents privileged, to drop every node's page cache before each read run (probe "
            "--drop-caches). Without it reads are made cold per file, unprivileged; the profile says which.",
            None,
            PANEL,
            type=bool,
        ),
    ] = False
    storage_class: Annotated[
        str | None,
        AfterValidator(_subdomain),
        Flag("--storage-class", "The claim's StorageClass, recorded in the profile.", None, PANEL),
    ] = None
    csi_driver: Annotated[
        str | None,
        AfterValidator(_subdomain),
        Flag("--csi-driver", "The claim's CSI driver, recorded in the profile.", None, PANEL),
    ] = None
    port: Annotated[
        int,
        Field(ge=1, le=65534),
        Flag("--port", "The agents' fio port; their info port is the next one.", "8765", PANEL),
    ] = 8765
    deadline_s: Annotated[
        float,
        parsed(parse_duration),
        Field(ge=1, le=7 * 86400),
        Flag("--deadline", "Each Job's activeDeadlineSeconds, e.g. 4h.", "4h", PANEL, type=str),
    ] = 4 * 3600.0
    plan: Annotated[
        CheckpointPlan | None,
        BeforeValidator(plan_input),
        Flag("--plan", "A plan from `ckplan size --json` to replay, carried by a ConfigMap.", None, None, type=Path),
    ] = None

    @model_validator(mode="after")
    def _names_fit(self) -> ManifestRequest:
        """The longest generated name must still be a label: the pods' hostnames (and a JobSet's pods' names)."""
        last = self.nodes - 1
        # JobSet's webhook checks its pods' names, which add '-' and 5 random characters to the hostname
        longest = f"{self.name}-agents-{last}-0-abcde" if self.form == "jobset" else f"{self.name}-agents-{last}"
        if len(longest) > 63:
            raise InputError(
                f"‹name› {self.name!r} is too long for {self.nodes:,} nodes: the last agent's name "
                f"{longest!r} would be over 63 characters"
            )
        return self
