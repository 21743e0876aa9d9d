"""The probe's backends, one module each: what a kind of target must do for the engine (probe/engine.py's
`Backend` and `Session`). Adding a target is one module beside these and one line in BACKENDS. A backend with
options of its own declares them as a model in its module, each field with its flag (ckplan.inputs.Flag), and
says by `claims(path)` whether a target is its own; `ProbeTarget` picks the first backend that claims the spec."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ckplan.probe import engine

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ckplan.probe.engine import Backend, CleanResult, Job, Progress, TargetSpec
    from ckplan.profile import StorageProfile

# kind → (module, backend class, its options' model or None), in the order they claim a target: an s3:// URL, then
# hosts given, else a directory on this host; a module is imported when a probe of its kind runs or its options are
# read, so that boto3 loads only for S3
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "s3": ("ckplan.probe.backends.s3", "S3Backend", "S3Options"),
    "hosts": ("ckplan.probe.backends.hosts", "HostsBackend", "HostsOptions"),
    "filesystem": ("ckplan.probe.backends.local", "LocalBackend", None),
}


def backend_options() -> dict[str, type[BaseModel]]:
    """Every backend's options model, by kind, in BACKENDS' order."""
    return {
        kind: getattr(importlib.import_module(module), options)
        for kind, (module, _, options) in BACKENDS.items()
        if options is not None
    }


def claiming(path: str, given: Mapping[str, Any]) -> tuple[str, Any]:
    """The first backend that claims `path`, by kind, with its options: those `given` for its kind, else its
    defaults (None: a directory on this host, which has no options)."""
    for kind, model in backend_options().items():
        own: Any = given.get(kind) or model()
        if own.claims(path):
            return kind, own
    return "filesystem", None


class ProbeTarget:
    """A target to measure into a StorageProfile or clean of what a killed probe left: the backend that claims its
    spec (`BACKENDS`), prepared once, on first need, so that every check runs before a byte is written."""

    def __init__(self, spec: TargetSpec):
        self.spec, self.plan = spec, spec.plan
        own = {spec.options.kind: spec.options} if spec.options is not None else {}
        module, name, _ = BACKENDS[claiming(spec.path, own)[0]]
        self.backend: Backend = getattr(importlib.import_module(module), name)(spec)
        self.kind = self.backend.kind
        self._job: Job | None = None

    def prepare(self) -> Job:
        if self._job is None:
            self._job = engine.prepare(self.spec, self.backend)
        return self._job

    @property
    def estimated_seconds(self) -> float:
        return self.prepare().estimated_seconds

    def run(self, progress: Progress | None = None) -> StorageProfile:
        return engine.run(self.prepare(), self.backend, progress)

    def clean(self, force: bool = False) -> CleanResult:
        return self.backend.clean(force)
