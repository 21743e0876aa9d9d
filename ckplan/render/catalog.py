"""The model catalog as a table and as JSON."""

from __future__ import annotations

from pydantic import BaseModel
from rich.table import Table

from ckplan.render.console import console
from ckplan.sizing.architecture import Architecture, parameter_count


class CatalogEntry(BaseModel):
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


class ModelCatalog(BaseModel):
    models: list[CatalogEntry]

    @classmethod
    def from_catalog(cls, catalog: dict[str, Architecture]) -> "ModelCatalog":
        return cls(models=[CatalogEntry(parameters=parameter_count(a), **a.model_dump(include=set(CatalogEntry.model_fields) - {"parameters"}))
                           for a in catalog.values()])


def render_models(catalog: ModelCatalog) -> None:
    table = Table(title="Model catalog (parameter counts derived from each config)", title_justify="left")
    for col in ("name", "model", "parameters", "published", "hidden", "layers", "ffn", "heads/kv", "vocab", "tied", "experts"):
        table.add_column(col, justify="left" if col in ("name", "model") else "right")
    for m in catalog.models:
        table.add_row(m.name, m.display, f"{m.parameters:,}", f"{m.published_parameters:,}", str(m.hidden), str(m.layers),
                      str(m.ffn), f"{m.heads}/{m.kv_heads}", f"{m.vocab:,}", "yes" if m.tied_embeddings else "no", str(m.experts))
    console().print(table)
