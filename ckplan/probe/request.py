"""What a probe is asked to do: a `ProbeRequest`, each input declared once with its flag, help and bounds.

The request's own fields are every backend's (the target, the preset, the writers, a plan to replay, where the
profile goes); each backend's own options are its module's model (probe/backends), which the request holds by kind
and hands to the backend that claims the target. `ckplan probe`'s options are built from these fields
(ckplan.cli.options.probe_options) and `ckplan.api.open_probe` validates the same model, so both doors read,
bound and refuse an input in one place and the same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict

from ckplan.errors import InputError
from ckplan.inputs import Flag, parsed, validate_inputs
from ckplan.request import plan_input
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import MAX_GPUS, check_range, check_scale, parse_bytes

if TYPE_CHECKING:
    from ckplan.probe.engine import TargetSpec

Preset = Literal["quick", "default", "thorough"]


def _named_target(path: str) -> str:
    if not path.strip():  # Path("") is the current directory
        raise InputError("probe needs a directory or s3://bucket/prefix, got an empty path")
    return path


def _writers(writers: int | None) -> int | None:
    if writers is not None:
        check_range(writers, "‹writers›", 1, MAX_GPUS, limit=f"{MAX_GPUS:,}")
    return writers


def _options(options: Any) -> Any:
    """Backend kind → its options: the backend's own model, or a mapping of its fields read into one."""
    from ckplan.probe.backends import backend_options

    if not isinstance(options, Mapping):
        return options
    models, read = backend_options(), {}
    for kind, given in options.items():
        if kind not in models:
            raise InputError(f"‹options› names no backend with options: {kind!r} (takes {', '.join(models)})")
        model = models[kind]
        read[kind] = given if isinstance(given, model) else validate_inputs(model, given)
    return read


LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")
MAX_LABELS = 32
MAX_LABEL_VALUE = 253


def _labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise InputError(f"‹labels›: {len(labels)} labels, at most {MAX_LABELS}")
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise InputError(f"‹labels›: {key!r} is not a label name (letters, digits, . _ / -, at most 63)")
        if not value.isprintable() or len(value) > MAX_LABEL_VALUE:
            raise InputError(f"‹labels›: {key}'s value must be printable and at most {MAX_LABEL_VALUE} characters")
    return labels


def _scale(scale: float) -> float:
    return check_scale(scale, "‹scale›")


def _save(name: str | None) -> str | None:
    if name is not None:
        from ckplan import profile_store

        profile_store.check_name(name)
    return name


def _out(path: Path | None) -> Path | None:
    if path is not None:
        from ckplan.outputs import check_output_file

        check_output_file(path, "‹out›")
    return path


def _emit_jobs(path: Path | None) -> Path | None:
    if path is not None:
        from ckplan.outputs import check_output_dir

        check_output_dir(path, "‹emit_jobs›")
    return path


class ProbeRequest(Model):
    """A probe's inputs, checked before a byte is written: numbers in their units or as the flags take them
    ("10GB"), paths, and `options`, each backend's own options model by kind (`from_inputs` fills it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Annotated[str, AfterValidator(_named_target)]
    preset: Preset = "default"
    writers: Annotated[
        int | None,
        AfterValidator(_writers),
        Flag(
            "--writers", "Most writers to test (default: the plan's writers per node, else the CPU count).", panel=None
        ),
    ] = None
    plan: Annotated[
        CheckpointPlan | None,
        BeforeValidator(plan_input),
        Flag("--plan", "A plan from `ckplan size --json`.", panel=None, type=Path),
    ] = None
    scale: Annotated[
        float,
        AfterValidator(_scale),
        Flag("--scale", "Shrink every replayed file by this factor to fit a small machine.", str, None, type=float),
    ] = 1.0
    max_bytes: Annotated[
        int | None,
        parsed(parse_bytes),
        Flag("--max-bytes", "Most bytes the probe may write at once, e.g. 10GB.", panel=None, type=str),
    ] = None
    save: Annotated[
        str | None,
        AfterValidator(_save),
        Flag("--save", "Save the profile under this name in the user config directory.", panel=None),
    ] = None
    out: Annotated[Path | None, AfterValidator(_out), Flag("--out", "Write the profile to this file.", panel=None)] = (
        None
    )
    calibrate: bool = True  # measure this machine's serialisers (the CLI's --no-calibrate clears it)
    emit_jobs: Annotated[
        Path | None,
        AfterValidator(_emit_jobs),
        Flag(
            "--emit-jobs",
            "Write every fio run's job file, numbered in the order they ran, and run.sh to rerun them, "
            "into this new or empty directory.",
            panel=None,
            metavar="DIR",
        ),
    ] = None
    labels: Annotated[
        dict[str, str],
        AfterValidator(_labels),
        Flag(
            "--label",
            "Record NAME=VALUE in the profile's labels, as it is: where the probe ran (the Kubernetes manifests "
            "give the claim, StorageClass and CSI driver). Repeatable.",
            panel=None,
            metavar="NAME=VALUE",
        ),
    ] = {}
    # backend kind → its options model (probe/backends); a kind not here: its defaults
    options: Annotated[dict[str, Any], BeforeValidator(_options)] = {}

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> ProbeRequest:
        """A request from a caller's inputs (field name → value, flat: a backend's options among the rest), every
        backend's options read and bounded whatever the target (a bad --part-size is refused on a directory too),
        or one InputError."""
        from ckplan.probe.backends import backend_options

        models = backend_options()
        owned = {name for model in models.values() for name in model.model_fields}
        options = {kind: {k: v for k, v in inputs.items() if k in model.model_fields} for kind, model in models.items()}
        return validate_inputs(cls, {**{k: v for k, v in inputs.items() if k not in owned}, "options": options})

    def spec(self, notice: Callable[[str], None] | None = None) -> TargetSpec:
        """The engine's TargetSpec: these inputs, and the options of the first backend they claim the target for
        (none: a directory on this host)."""
        from ckplan.probe.backends import claiming
        from ckplan.probe.engine import TargetSpec

        _, claimed = claiming(self.path, self.options)
        return TargetSpec(
            self.path,
            preset=self.preset,
            writers=self.writers,
            plan=self.plan,
            scale=self.scale,
            max_bytes=self.max_bytes,
            name=self.save,
            calibrate=self.calibrate,
            emit_jobs=self.emit_jobs,
            notice=notice,
            options=claimed,
            labels=dict(self.labels),
        )
