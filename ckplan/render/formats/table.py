"""The table format: each result type's rich renderer.

The registry names each renderer's module instead of importing it, because importing every renderer costs
~70 ms (rich tables, the probe's progress display); a renderer module is imported only when its result is printed.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel

# result type name → (module under ckplan.render, function)
RENDERERS: dict[str, tuple[str, str]] = {
    "CheckpointPlan": ("plan", "render_plan"),
    "ModelCatalog": ("catalog", "render_models"),
    "StorageProfile": ("profile", "render_profile"),
    "Calibration": ("profile", "render_calibration"),
    "ProfileList": ("profile", "render_profiles"),
    "CleanResult": ("clean", "render_clean"),
    "Recommendation": ("recommend", "render_recommendation"),
    "Comparison": ("recommend", "render_comparison"),
    "ReportFiles": ("recommend", "render_report_files"),
    "Validation": ("validate", "render_validation"),
    "ProvisionSweep": ("provision", "render_provision"),
    "Diagnosis": ("diagnose", "render_diagnosis"),
    "RecordDiagnosis": ("diagnose", "render_record_diagnosis"),
    "RecordValidation": ("validate", "render_record_validation"),
    "WatchResult": ("watch", "render_watch"),
    "CompressReport": ("compress", "render_compress"),
    "Manifests": ("k8s", "render_manifests"),
}


def emit(result: BaseModel, **options: Any) -> None:
    module, function = RENDERERS[type(result).__name__]
    getattr(importlib.import_module(f"ckplan.render.{module}"), function)(result, **options)
