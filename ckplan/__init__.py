"""ckplan: how often a training run can safely checkpoint, and what storage that takes.

The commands' work is importable from here (ckplan.api): `ckplan.size(params="7B")`, `ckplan.recommend(plan, "nfs")`.
They load on first use, so `import ckplan` costs no more than the version.
"""

from __future__ import annotations

from ckplan.version import __version__

__all__ = ["__version__", "api", "compare", "diagnose", "probe", "provision", "recommend", "size"]

# not typing.TYPE_CHECKING: importing typing would take longer than the rest of `import ckplan` (mypy and ruff read
# any constant of this name the same way)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckplan import api
    from ckplan.api import compare, diagnose, probe, provision, recommend, size


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib  # not `from ckplan import api`: with "api" in __all__ that would call this again

        api = importlib.import_module("ckplan.api")
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'ckplan' has no attribute {name!r}")
