"""Framework checkpoint layouts: one module per framework, one interface (base.Layout)."""

from __future__ import annotations

from ckplan.sizing.layouts.base import Layout
from ckplan.sizing.layouts.dcp import DcpLayout
from ckplan.sizing.layouts.deepspeed import DeepSpeedLayout
from ckplan.sizing.layouts.dlio import DlioLayout
from ckplan.sizing.layouts.hf import HfLayout
from ckplan.sizing.layouts.lightning import LightningLayout
from ckplan.sizing.layouts.megatron import MegatronLayout

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (DeepSpeedLayout(), DcpLayout(), MegatronLayout(), HfLayout(), LightningLayout(), DlioLayout())
}
