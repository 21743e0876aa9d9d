"""The model catalog as a table and as JSON."""

from __future__ import annotations

from rich.table import Table

from ckplan.catalog import ModelCatalog
from ckplan.render.console import console, shown


def render_models(catalog: ModelCatalog) -> None:
    table = Table(title="Model catalog (parameter counts derived from each config)", title_justify="left")
    for col in (
        "name",
        "model",
        "parameters",
        "published",
        "hidden",
        "layers",
        "ffn",
        "heads/kv",
        "vocab",
        "tied",
        "experts",
    ):
        table.add_column(col, justify="left" if col in ("name", "model") else "right")
    for m in catalog.models:
        table.add_row(
            shown(m.name),
            shown(m.display),
            f"{m.parameters:,}",
            f"{m.published_parameters:,}",
            str(m.hidden),
            str(m.layers),
            str(m.ffn),
            f"{m.heads}/{m.kv_heads}",
            f"{m.vocab:,}",
            "yes" if m.tied_embeddings else "no",
            str(m.experts),
        )
    console().print(table)
