"""The packaged data under profiles/: the model catalog and the built-in storage classes.

In a built wheel the data sits at ckplan/profiles (hatch force-include); in a
source checkout or editable install it is the repository's top-level profiles/.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ckplan.errors import InputError, did_you_mean
from ckplan.model.architecture import Architecture, parameter_count
from ckplan.readers import validation_message
from ckplan.schema import Model

if TYPE_CHECKING:
    from ckplan.planning.compression import CompressionDefault
    from ckplan.planning.data import PlanningData
    from ckplan.profile import StorageProfile


def profiles_dir() -> Path:
    packaged = Path(__file__).parent / "profiles"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).parent.parent / "profiles"
    if source.is_dir():
        return source
    raise InputError("ckplan's profiles/ data is missing from this installation; reinstall ckplan")


def load_toml(path: Path, what: str) -> dict:
    import tomllib

    from ckplan.readers import read_text_file

    try:
        return tomllib.loads(read_text_file(path, what))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{what} {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise InputError(f"{what} {path} is nested too deeply to be a ckplan file") from None


@lru_cache(maxsize=1)
def models() -> dict[str, Architecture]:
    out = {}
    for path in sorted((profiles_dir() / "models").glob("*.toml")):
        try:
            arch = Architecture.model_validate(load_toml(path, "model profile"))
        except ValidationError as exc:
            raise InputError(f"malformed model profile {path.name}: {validation_message(exc)}") from None
        out[arch.name] = arch
    return out


def model(name: str) -> Architecture:
    """A catalog model by name, or the user's own entry: a TOML file in the schema of profiles/models/."""
    if name.lower().endswith(".toml"):
        from ckplan.readers import validate_model

        return validate_model(load_toml(Path(name), "model file"), Architecture, f"model file {name}")
    catalog = models()
    if name.lower() not in catalog:
        raise InputError(f"unknown model {name!r}{did_you_mean(name, sorted(catalog))}")
    return catalog[name.lower()]


def config_model(path: Path) -> Architecture:
    """The model a Hugging Face config.json describes (model/hf_config.py), read from the file alone.

    Its name is the config's _name_or_path where the file records one, else the directory holding a file named
    config.json (a downloaded model's folder), else the file's own name.
    """
    from ckplan.model.hf_config import architecture_from_config
    from ckplan.readers import read_json

    data = read_json(path, "config.json")
    recorded = data.get("_name_or_path") if isinstance(data, dict) else None
    if isinstance(recorded, str) and recorded.strip() and len(recorded) <= 200 and recorded.isprintable():
        name = recorded.strip()
    elif path.name == "config.json" and path.resolve().parent.name:
        name = path.resolve().parent.name
    else:
        name = path.stem
    model_type = data.get("model_type") if isinstance(data, dict) else None
    return architecture_from_config(data, name=name, source=f"{path}, model_type {model_type}", label=str(path))


@lru_cache(maxsize=1)
def storage_classes() -> dict[str, StorageProfile]:
    from ckplan.profile import StorageProfile

    out = {}
    for path in sorted((profiles_dir() / "storage").glob("*.toml")):
        try:
            profile = StorageProfile.model_validate(load_toml(path, "storage profile"))
        except ValidationError as exc:
            raise InputError(f"malformed storage profile {path.name}: {validation_message(exc)}") from None
        out[profile.name] = profile
    return out


@lru_cache(maxsize=1)
def compression_default() -> CompressionDefault:
    from ckplan.planning.compression import CompressionDefault

    data = load_toml(profiles_dir() / "compression.toml", "compression table")
    try:
        return CompressionDefault.model_validate(data["default"])
    except (KeyError, ValidationError) as exc:
        raise InputError(f"malformed compression table: {exc}") from None


def planning_data() -> PlanningData:
    """The packaged figures the planner reads: built-in storage classes (tiers, faster targets) and the codec."""
    from ckplan.planning.data import PlanningData

    return PlanningData(storage_classes=storage_classes(), codec=compression_default())


class CatalogEntry(Model):
    name: str
    display: str
    parameters: int
    published_parameters: int
    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool
    experts: int


class ModelCatalog(Model):
    """`ckplan models`: the catalog with each model's derived and published parameter counts."""

    models: list[CatalogEntry]

    @classmethod
    def from_catalog(cls, catalog: dict[str, Architecture]) -> ModelCatalog:
        return cls(
            models=[
                CatalogEntry(
                    parameters=parameter_count(a),
                    **a.model_dump(include=set(CatalogEntry.model_fields) - {"parameters"}),
                )
                for a in catalog.values()
            ]
        )
