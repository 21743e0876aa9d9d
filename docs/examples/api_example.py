"""ckplan from Python, as in a notebook: size a save, recommend an interval on a built-in storage class, print it.

tests/test_api.py runs this file and type-checks it with mypy.
"""

import ckplan
from ckplan.errors import InputError
from ckplan.planning.recommend import Recommendation
from ckplan.sizing.plan import CheckpointPlan

plan: CheckpointPlan = ckplan.size(params="7B", optimizer="adam", framework="deepspeed", gpus=16)
print(f"one save writes {plan.total_bytes / 1e9:.1f} GB in {plan.file_count} files")

rec: Recommendation = ckplan.recommend(plan, "nfs", max_overhead="5%", mtbf_s=8 * 3600)
print(f"save every {rec.optimal_interval_s / 60:.1f} min (at least every {rec.shortest_safe_interval_s / 60:.1f} min)")

try:
    ckplan.recommend(plan, "nfs", max_overhead=-1)
except InputError as exc:
    print(f"refused: {exc}")
