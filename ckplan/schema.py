"""The base of every ckplan pydantic model: its schema is built on first use, not at import.

Building a model's validator costs a few ms per model; ckplan defines some forty, and most commands use a
handful, so deferring the build keeps `ckplan size` near the start-up of typer, rich and pydantic themselves
(issue 17, scripts/bench_size.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)
