"""`ckplan k8s`'s output for people and for kubectl alike: the manifests as one YAML stream."""

from __future__ import annotations

import sys

from ckplan.k8s.manifests import Manifests, as_yaml


def render_manifests(result: Manifests) -> None:
    sys.stdout.write(as_yaml(result))  # not through rich: kubectl reads it, and markup or wrapping would break it
