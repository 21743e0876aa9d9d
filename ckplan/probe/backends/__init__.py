"""The probe's backends, one module each: what a kind of target must do for the engine (probe/engine.py's
`Backend` and `Session`). Adding a target is one module beside these and one line in BACKENDS; `ProbeTarget`
picks one from the spec (an s3:// URL, hosts given, else a directory on this host)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ckplan.probe import engine

if TYPE_CHECKING:
    from ckplan.probe.engine import Backend, CleanResult, Job, Progress, TargetSpec
    from ckplan.profile import StorageProfile

# kind → (module, class); imported when a probe of that kind runs, so that boto3 loads only for S3
BACKENDS = {
    "filesystem": ("ckplan.probe.backends.local", "LocalBackend"),
    "hosts": ("ckplan.probe.backends.hosts", "HostsBackend"),
    "s3": ("ckplan.probe.backends.s3", "S3Backend"),
}


class ProbeTarget:
    """A target to measure into a StorageProfile or clean of what a killed probe left: the backend its spec names
    (`BACKENDS`), prepared once, on first need, so that every check runs before a byte is written."""

    def __init__(self, spec: TargetSpec):
        self.spec, self.plan = spec, spec.plan
        # an s3:// URL (malformed ones get the S3 parser's message), hosts' options given, else a directory on this
        # host; an object store's options on a directory are its defaults' and name no other backend
        kind = getattr(spec.options, "kind", None)
        kind = "s3" if spec.path.startswith("s3:") else "hosts" if kind == "hosts" else "filesystem"
        module, name = BACKENDS[kind]
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
