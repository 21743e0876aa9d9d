"""The aggregate write bandwidth of N nodes saving at once on one storage profile: the one owner of that figure.

The save-time model (savetime.predict_save), provision's headroom and the report all read it from here.

Rules, in order:
- node-local target (`shared=False`: NVMe, tmpfs): each node writes its own device, so the aggregate is the
  per-node figure × the nodes. No shared system, so no limit applies.
- shared target, within the measured host counts (the probe's curve over hosts, or, without one, the profile's
  per-node figure as one point at 1 host): `profile.interpolate`, as every measured curve is read.
- shared target, beyond the largest measured host count:
  - a known limit of the whole system (given by the caller, else the profile's `aggregate_limit_bytes_per_s`):
    min(per-node × nodes, limit);
  - otherwise, where the curve had stopped growing (`reached_saturation`) at three or more distinct host counts,
    the Universal Scalability Law fitted to them (`fit_usl`), never above λN, unless it ends on a plateau
    (`on_plateau`: its last two host counts within PLATEAU of each other): a curve flat at its top shows no turn,
    and the coherency term a fit draws from the scatter of such points bends it down where nothing was measured
    to fall;
  - else the best measured aggregate, held flat. A shared target that saturates at one host (one
    NFS server, one disk behind every host) goes no faster with more nodes, and two points cannot tell a
    curve that keeps rising from one that has turned over, so the figure that was seen is all that is claimed.
Every figure beyond the measured range is `extrapolated`, and its label names the model, the largest measured
host count and the nodes.

Below the knee. A probe whose aggregate was still growing at its largest host count (`reached_saturation`) cannot
say where the curve turns, and a law fitted to a curve that has not turned extrapolates it rising. Held flat, the
figure is the long end of what the save may take; per-node × nodes, the curve never turning, is the short end. Such
an estimate carries that short end (`unsaturated_bytes_per_s`) and says so in its label (NOT_SATURATED), so that
the save time is given as the range between them. A known limit of the whole system (given or in the profile)
closes the range: it is the answer the probe could not give.
"""

from __future__ import annotations

from typing import Literal

from ckplan.profile import BandwidthPoint, StorageProfile, interpolate
from ckplan.schema import Model
from ckplan.units import MAX_RATE_BYTES_PER_S, check_range, fmt_rate

AggregateModel = Literal["measured", "interpolated", "usl", "flat", "given limit", "profile limit", "node-local"]
USL_MIN_HOST_COUNTS = 3  # a three-parameter fit needs three distinct host counts; fewer are held flat
# a curve has stopped growing where its last added hosts raised the aggregate by less than half of what each host
# gave before them: a curve still rising by more is below its knee, wherever that is
SATURATION_GAIN = 0.5
NOT_SATURATED = "the probe did not reach saturation: probe with more hosts, or give --aggregate-limit"
# the scatter of one aggregate point between runs of a stationary system: on the testbed's 400 Mbit/s server port
# (docs/testbed.md), the 8-host points of six probes, one run each, lay between 45.6 and 49.6 MB/s (±4% of their
# middle); two points closer than twice that are one level, not a slope
PLATEAU = 0.10


class UslFit(Model):
    """X(N) = λN ÷ (1 + σ(N−1) + κN(N−1)) (Gunther's Universal Scalability Law), in bytes/s."""

    lambda_bytes_per_s: float  # λ: one host's throughput, the slope at N → 0 without contention
    sigma: float  # σ ≥ 0: contention (the serialised share)
    kappa: float  # κ ≥ 0: coherency (pairwise crosstalk), which makes the curve turn over past √((1 − σ)/κ)
    hosts: list[int]  # the host counts it was fitted to

    def at(self, n: float) -> float:
        """X(n), never above λn (σ, κ ≥ 0 keep the denominator ≥ 1; the min guards rounding)."""
        linear = self.lambda_bytes_per_s * n
        return min(linear / (1 + self.sigma * (n - 1) + self.kappa * n * (n - 1)), linear)


class AggregateEstimate(Model):
    """The aggregate bandwidth of `nodes` nodes writing at once, and how it was arrived at."""

    bytes_per_s: float
    model: AggregateModel
    extrapolated: bool  # beyond the largest measured host count on a shared target
    nodes: int
    measured_hosts_max: int  # the largest host count measured (1 for a single-host profile)
    per_node_bytes_per_s: float  # the per-node figure at the plan's writers per node
    limit_bytes_per_s: float | None = None  # the system limit used, if any
    usl: UslFit | None = None
    # the short end, per-node × nodes, where the probe did not reach saturation and no system limit is known:
    # the aggregate is then anywhere from bytes_per_s (held flat or fitted) to this
    unsaturated_bytes_per_s: float | None = None
    label: str


def _hosts(n: int) -> str:
    return f"{n:,} host{'s' if n != 1 else ''}"


def _nodes(n: int) -> str:
    return f"{n:,} node{'s' if n != 1 else ''}"


def _counts(hosts: list[int]) -> str:
    """'1, 2 and 4 hosts', '2 hosts', '1 host'."""
    if len(hosts) == 1:
        return _hosts(hosts[0])
    return ", ".join(f"{h:,}" for h in hosts[:-1]) + f" and {hosts[-1]:,} hosts"


def _solve(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Ordinary least squares: the x minimising Σ (row·x − y)², from the normal equations by Gaussian elimination with
    partial pivoting (columns scaled to unit size first, so that N(N−1) beside 1 keeps its digits); None if singular."""
    k = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    a = [[sum(r[i] / scale[i] * r[j] / scale[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] / scale[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-12 * max(1.0, max(abs(v) for row in a for v in row)):
            return None
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(col + 1, k):
            f = a[i][col] / a[col][col]
            a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
            b[i] -= f * b[col]
    x = [0.0] * k
    for i in reversed(range(k)):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, k))) / a[i][i]
    return [x[j] / scale[j] for j in range(k)]


def _last_two(points: list[tuple[int, float]]) -> tuple[tuple[int, float], tuple[int, float]] | None:
    """The last two host counts of a curve with each one's best figure, or None where it has fewer than two."""
    best: dict[int, float] = {}
    for h, x in points:
        best[h] = max(x, best.get(h, 0.0))
    if len(best) < 2:
        return None
    before, last = sorted(best.items())[-2:]
    return before, last


def reached_saturation(points: list[tuple[int, float]]) -> bool:
    """Whether a measured aggregate curve (hosts, bytes/s) had stopped growing at its largest host count: the last
    step's gain per added host is below SATURATION_GAIN × the per-host aggregate of the point before it. One host
    count alone shows no curve, so it has not."""
    if (pair := _last_two(points)) is None:
        return False
    (h0, x0), (h1, x1) = pair
    return (x1 - x0) / (h1 - h0) < SATURATION_GAIN * x0 / h0


def on_plateau(points: list[tuple[int, float]]) -> bool:
    """Whether a curve's last two host counts measured the same level: their best figures within PLATEAU of the
    larger."""
    if (pair := _last_two(points)) is None:
        return False
    (_, x0), (_, x1) = pair
    return abs(x1 - x0) <= PLATEAU * max(x0, x1)


def fit_usl(points: list[tuple[int, float]]) -> UslFit:
    """The Universal Scalability Law fitted to measured (hosts, aggregate bytes/s) points, three or more host counts.

    Method: Gunther's linearisation of the USL (N. J. Gunther, *Guerrilla Capacity Planning*, Springer 2007, ch. 5-6;
    "A General Theory of Computational Scalability Based on Rational Functions", arXiv:0808.1431). Its reciprocal is a
    quadratic in N, N ÷ X(N) = a + b(N−1) + cN(N−1) with a = 1/λ, b = σ/λ, c = κ/λ, so ordinary least squares on
    N ÷ X gives a, b, c; unlike the normalised form (X(N) ÷ X(1)) it needs no point at one host. σ and κ must not be
    negative (a negative σ or κ is superlinear scaling, which extrapolates to ever faster storage): where the free
    fit gives one, the fit is repeated with b, c or both pinned at 0, and the feasible fit with the least squared
    residual is kept, which is the constrained least-squares optimum (the objective is convex, and its constrained
    minimum is the free minimum on one of those faces). The fit with b = c = 0 (a = the mean of N ÷ X > 0) is
    always feasible, so a fit always exists.
    """
    distinct = sorted({h for h, _ in points})
    if len(distinct) < USL_MIN_HOST_COUNTS:
        raise ValueError(f"a USL fit needs {USL_MIN_HOST_COUNTS} distinct host counts, got {len(distinct)}")
    top = max(x for _, x in points)  # fitted in units of the best point, so that a, b, c are near 1
    ys = [n / (x / top) for n, x in points]
    columns = [lambda n: 1.0, lambda n: float(n - 1), lambda n: float(n * (n - 1))]
    best: tuple[float, list[float]] | None = None
    for free in ((0, 1, 2), (0, 1), (0, 2), (0,)):
        rows = [[columns[j](n) for j in free] for n, _ in points]
        solved = _solve(rows, ys)
        if solved is None:
            continue
        coef = [0.0, 0.0, 0.0]
        for j, v in zip(free, solved, strict=True):
            coef[j] = v
        if coef[0] <= 0 or coef[1] < 0 or coef[2] < 0:
            continue
        residual = sum(
            (coef[0] + coef[1] * (n - 1) + coef[2] * n * (n - 1) - y) ** 2 for (n, _), y in zip(points, ys, strict=True)
        )
        if best is None or residual < best[0] * (1 - 1e-12):
            best = (residual, coef)
    assert best is not None  # the (a) fit is the mean of positive numbers
    a, b, c = best[1]
    return UslFit(lambda_bytes_per_s=top / a, sigma=max(0.0, b / a), kappa=max(0.0, c / a), hosts=distinct)


def aggregate_estimate(
    profile: StorageProfile,
    per_node: float,
    nodes: int,
    limit: float | None = None,
    points: list[BandwidthPoint] | None = None,
) -> AggregateEstimate:
    """The aggregate bandwidth of `nodes` nodes on `profile`, each at `per_node` bytes/s alone (the profile's
    per-host figure at the plan's writers per node). `limit`: the whole shared system's limit as the user gave it,
    which replaces the profile's and any fit. `points`: the aggregate curve to use, the profile's writes by default
    (a load passes its reads)."""
    points = profile.aggregate_bandwidth if points is None else points
    if limit is not None:
        check_range(limit, "‹aggregate_limit_bytes_per_s›", 0, MAX_RATE_BYTES_PER_S, above_minimum=True, limit="1 PB/s")
    if not profile.shared:
        label = f"node-local: {fmt_rate(per_node)} per node × {_nodes(nodes)} (each node writes its own device)"
        if limit is not None:
            label += "; the given system limit does not apply to node-local storage"
        return AggregateEstimate(
            bytes_per_s=per_node * nodes,
            model="node-local",
            extrapolated=False,
            measured_hosts_max=max((p.hosts for p in points), default=1),
            label=label,
            nodes=nodes,
            per_node_bytes_per_s=per_node,
        )
    # a shared target measured from one host only: its per-node figure is the one point, at 1 host
    measured = [(p.hosts, p.bytes_per_s) for p in points] or [(1, per_node)]
    hosts = sorted({h for h, _ in measured})
    top = hosts[-1]
    inside = interpolate([(float(h), x) for h, x in measured], nodes)
    if inside is not None:
        exact = nodes in hosts
        return AggregateEstimate(
            bytes_per_s=inside,
            model="measured" if exact else "interpolated",
            extrapolated=False,
            measured_hosts_max=top,
            label=(
                f"measured at {_hosts(nodes)}"
                if exact
                else f"interpolated ({_nodes(nodes)}, measured at {_counts(hosts)})"
            ),
            nodes=nodes,
            per_node_bytes_per_s=per_node,
        )
    basis = "measured" if profile.source == "measured" else "typical figures"  # a built-in class measured nothing
    where = f"{_nodes(nodes)}, {basis} up to {_hosts(top)}"
    system_limit = limit if limit is not None else profile.aggregate_limit_bytes_per_s
    if system_limit is not None:
        whose = "the given system limit" if limit is not None else "the profile's limit"
        return AggregateEstimate(
            bytes_per_s=min(per_node * nodes, system_limit),
            model="given limit" if limit is not None else "profile limit",
            extrapolated=True,
            measured_hosts_max=top,
            limit_bytes_per_s=system_limit,
            label=f"extrapolated ({fmt_rate(per_node)} per node × {_nodes(nodes)}, at most {whose}, "
            f"{fmt_rate(system_limit)}; {where})",
            nodes=nodes,
            per_node_bytes_per_s=per_node,
        )
    return _beyond_measured(measured, nodes, per_node, where)


def _beyond_measured(measured: list[tuple[int, float]], nodes: int, per_node: float, where: str) -> AggregateEstimate:
    """Past the measured hosts with no limit known: the USL fit where the curve bends, else the best point held flat,
    and the range up to every node at its own rate where the probe never saw saturation."""
    hosts = sorted({h for h, _ in measured})
    top = hosts[-1]
    model: AggregateModel
    saturated = reached_saturation(measured)
    if saturated and len(hosts) >= USL_MIN_HOST_COUNTS and not on_plateau(measured):
        fit = fit_usl(measured)
        figure, model = fit.at(nodes), "usl"
        label = f"extrapolated (Universal Scalability Law fitted to {_counts(hosts)}; {where})"
    else:
        best_hosts, figure = max(measured, key=lambda p: (p[1], -p[0]))
        fit, model = None, "flat"
        label = f"extrapolated (the best measured aggregate, {fmt_rate(figure)} at {_hosts(best_hosts)}, held flat; {where})"
    short_end = None
    if not saturated and per_node * nodes > figure:
        short_end = per_node * nodes
        label += f"; {NOT_SATURATED}: {fmt_rate(figure)} to {fmt_rate(short_end)}"
    return AggregateEstimate(
        bytes_per_s=figure,
        model=model,
        extrapolated=True,
        measured_hosts_max=top,
        usl=fit,
        unsaturated_bytes_per_s=short_end,
        label=label,
        nodes=nodes,
        per_node_bytes_per_s=per_node,
    )


def describe_rule() -> str:
    """The rule above in one line, for the assumptions lists that use it."""
    return (
        "aggregate over nodes (planning/scaling.py): node-local targets per node × nodes; shared targets interpolated "
        "between measured host counts, and beyond the largest: min(per node × nodes, the system limit) where one is "
        "known (--aggregate-limit, or the profile's), else the Universal Scalability Law fitted to three or more "
        "measured host counts where the curve had stopped growing and not ended on a plateau, else the best measured "
        "aggregate held flat; where "
        "the probe's aggregate was still growing at its largest host count, per node × nodes is the short end of a "
        "range"
    )
