"""Where storage profiles live: saved ones under the user's config directory, built-in classes in the package."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ckplan import catalog
from ckplan.errors import InputError, did_you_mean
from ckplan.profile import SCHEMA_VERSION, StorageProfile
from ckplan.schema import Model


def saved_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ckplan" / "profiles"


MAX_NAME_BYTES = 255 - len(".json")  # a file name is at most 255 bytes on every Linux file system


def check_name(name: str) -> None:
    """A --save name becomes NAME.json in the profile directory: no path separator, no hidden file, one printable
    line, short enough to be a file name; and the directory can be made and written (checked before a probe runs)."""
    if not name.strip() or "/" in name or name.startswith(".") or not name.isprintable():
        raise InputError(f"‹save› takes a plain name (no '/', no leading '.', no control characters), got {name!r}")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise InputError(
            f"‹save› is {len(name.encode()):,} bytes long; a profile's name is at most {MAX_NAME_BYTES} "
            f"(it becomes the file NAME.json): {name[:40]!r}…"
        )
    from ckplan.outputs import check_output_dir

    check_output_dir(saved_dir(), "‹save› profile")


def save(profile: StorageProfile, name: str) -> Path:
    check_name(name)
    path = saved_dir() / f"{name}.json"
    text = profile.model_copy(update={"name": name}).model_dump_json(indent=2).encode()
    # written beside its final name, then renamed over it: a link planted under that name is replaced, not followed
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(f"cannot save the profile as {path}: {exc.strerror}") from None
    return path


def write(result: Model, path: Path) -> None:
    """A profile or a calibration as JSON in the file the user named (--out)."""
    try:
        path.write_text(result.model_dump_json(indent=2))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None


def load_file(path: Path, follow: bool = True) -> StorageProfile:
    """A profile file; follow=False for the saved ones, in a directory that may be shared (XDG_CONFIG_HOME)."""
    from ckplan.readers import read_json, validate_model

    if path.suffix == ".toml":
        data = catalog.load_toml(path, "storage profile")
    else:
        data = read_json(path, "storage profile", follow=follow)
    if not isinstance(data, dict) or data.get("kind", "ckplan.storage") != "ckplan.storage":
        raise InputError(
            f"storage profile {path} is not a ckplan storage profile (one comes from `ckplan probe --out`)"
        )
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(
            f"storage profile {path} has schema version {version!r} (ckplan {data.get('ckplan_version', '?')}); "
            f"this ckplan reads version {SCHEMA_VERSION}: probe again"
        )
    return validate_model(data, StorageProfile, f"{path} is not a valid storage profile")


def saved() -> dict[str, Path]:
    directory = saved_dir()
    return {p.stem: p for p in sorted(directory.glob("*.json"))} if directory.is_dir() else {}


def resolve(spec: str) -> StorageProfile:
    """A profile file path, a saved profile name, or a built-in class name."""
    path = Path(spec).expanduser()
    if path.suffix in (".json", ".toml") or os.sep in spec:
        if not path.exists():
            raise InputError(f"storage profile file {spec} does not exist")
        return load_file(path)
    if spec in saved():
        return load_file(saved()[spec], follow=False)
    builtin = catalog.storage_classes()
    if spec in builtin:
        return builtin[spec]
    names = sorted(set(saved()) | set(builtin))
    raise InputError(f"unknown storage {spec!r}{did_you_mean(spec, names)}")


class ProfileRow(Model):
    name: str
    source: str
    storage_class: str
    fs_type: str
    best_write_bytes_per_s: float
    files_per_s: float
    fsync_p99_s: float
    location: str


class ProfileList(Model):
    profiles: list[ProfileRow]

    @classmethod
    def collect(cls) -> ProfileList:
        def row(p: StorageProfile, where: str) -> ProfileRow:
            return ProfileRow(
                name=p.name,
                source=p.source,
                storage_class=p.storage_class,
                fs_type=p.fs_type,
                best_write_bytes_per_s=p.best_write_bytes_per_s,
                files_per_s=p.small_files.files_per_s,
                fsync_p99_s=p.fsync_latency.p99_s,
                location=where,
            )

        rows = [row(load_file(path, follow=False), str(path)) for path in saved().values()]
        rows += [row(p, "built-in") for p in catalog.storage_classes().values()]
        return cls(profiles=rows)
