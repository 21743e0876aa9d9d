"""Where storage profiles live: saved ones under the user's config directory, built-in classes in the package."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from ckplan import catalog
from ckplan.errors import InputError
from ckplan.profile import SCHEMA_VERSION, StorageProfile


def saved_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ckplan" / "profiles"


def save(profile: StorageProfile, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"--save takes a plain name, got {name!r}")
    path = saved_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.model_copy(update={"name": name}).model_dump_json(indent=2))
    return path


def write(profile: StorageProfile, path: Path) -> None:
    try:
        path.write_text(profile.model_dump_json(indent=2))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None


def load_file(path: Path) -> StorageProfile:
    import json

    from ckplan.catalog import validation_message

    if path.suffix == ".toml":
        data = catalog.load_toml(path)
    else:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise InputError(f"cannot read storage profile {path}: {exc.strerror}") from None
        except ValueError:
            raise InputError(f"{path} is not a storage profile: not valid JSON") from None
    if not isinstance(data, dict) or data.get("kind", "ckplan.storage") != "ckplan.storage":
        raise InputError(f"{path} is not a ckplan storage profile")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(f"{path} has storage-profile schema version {version} (ckplan {data.get('ckplan_version', '?')}); "
                         f"this ckplan reads version {SCHEMA_VERSION}: probe again")
    try:
        return StorageProfile.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path} is not a valid storage profile: {validation_message(exc)}") from None


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
        return load_file(saved()[spec])
    builtin = catalog.storage_classes()
    if spec in builtin:
        return builtin[spec]
    names = sorted(set(saved()) | set(builtin))
    raise InputError(f"unknown storage {spec!r}{catalog.closest(spec, names)}")
