"""matplotlib, imported on demand: only `report` and `provision --chart` draw, and it is an optional extra."""

from __future__ import annotations

from ckplan.errors import missing_extra


def pyplot(what: str):
    """matplotlib.pyplot on the file-only Agg backend, or an EnvironmentProblem naming `what` needs it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra(what, "matplotlib", "report") from None
    return plt
