"""Every default the planner assumes, named once: policy.Policy's fields start from these, every output that uses one
says so (policy.provenance), and the CLI shows them. Plain values and no imports beyond typing, so that a command
that only shows a default (`ckplan size --max-overhead`) pays nothing for it."""

from __future__ import annotations

from typing import Literal

# Failure model: M_job = 1 / (nodes × node rate + job rate) (interval.job_mtbf), fitted exactly through the two
# published *observed* job MTBFs at scale (shared reference intervals.md; 8 GPUs per node):
#   Meta research clusters (HPCA 2025): 7.9 h at 1,024 GPUs (128 nodes)        → 24/7.9    = 3.038 interruptions/day
#   Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 GPUs (2,048 nodes) → 419/54 = 7.759 /day
#   node rate = (7.759 − 3.038) / (2,048 − 128) = 2.459e-3 per node-day = 2.46 per 1,000 node-days
#   job rate  = 3.038 − 128 × 2.459e-3 = 2.72 per day (software, network and other causes that do not scale with nodes)
# The fit gives 7.9 h at 1,024 GPUs and 3.09 h at 16,384 (docs/benchmarks.md); HPCA 2025's 1.8 h at 16k GPUs is a
# projection, not an observation, and is shown beside the fit, not fitted. The old defaults (5 per 1,000 node-days +
# 1 per job-day) gave 14.6 h at 1,024 GPUs: intervals ~1.36× too long there.
DEFAULT_NODE_FAILURES_PER_1000_DAYS = 2.46
DEFAULT_JOB_FAILURES_PER_DAY = 2.72
# The part of a restart that is not the checkpoint's load: detect the failure (a hung collective is seen only when
# torch.distributed's timeout fires), reschedule, start the processes and initialise the process group. The load is
# predicted from the plan's restore manifest and the profile's read curve (savetime.predict_load) and added to it.
# A crashed rank is seen within seconds (NCCL's async error handling aborts the group), a hung collective only after
# the timeout below; 5 minutes is a middle assumption, labelled "default" wherever it is used (--restart-fixed).
DEFAULT_RESTART_FIXED_S = 300.0
# torch.distributed's default process-group timeout for NCCL (default_pg_timeout, 10 minutes): a rank that waits this
# long in a collective while another rank still writes its save is killed by the watchdog
COLLECTIVE_TIMEOUT_S = 600.0
COLLECTIVE_TIMEOUT_WARN_FRACTION = 0.5  # a sync save longer than this share of the timeout is warned about
DEFAULT_MAX_LOSS_S = 3600.0
DEFAULT_MAX_OVERHEAD = 0.05  # CheckFreq's default budget
# GPU -> pinned host memory per GPU; PCIe Gen5 x16 moves ~50 GB/s peak, ~20-25 GB/s sustained
# in DCP async snapshots. Not measured here (no GPU on this machine): override with --snapshot-bandwidth.
DEFAULT_SNAPSHOT_BYTES_PER_S = 20e9
DEFAULT_HOST_MEMORY_BYTES = 2 * 2**40  # a typical 8-GPU H100/H200 node: 2 TiB of DRAM
DEFAULT_LOCAL_DISK_BYTES = 8 * 3.84e12  # 8 × 3.84 TB NVMe drives, a typical DGX-class node
DEFAULT_CHANGED_FRACTION = 1.0  # dense LLM weights and optimizer states all change every step
# Serialiser throughput per writer (one process, one core), by file format, written into /dev/null so the
# write itself is not counted twice (the bandwidth curve counts it), and DCP's fixed cost per save (a save of
# a few KiB per rank, 2 ranks over gloo). Used only where the profile has no calibration of its own
# (`ckplan calibrate`, run by `ckplan probe` where PyTorch is installed); every output that uses them says
# "default". Measured on the 2-core development VM with `ckplan calibrate` (docs/benchmarks.md).
DEFAULT_SERIALIZE_BYTES_PER_S = {"torch.save": 1.16e9, "safetensors": 1.36e9, "dcp": 1.0e9}
DEFAULT_DCP_FIXED_S = 0.010
# Deserialiser throughput per reader (one process, one core), by file format, from bytes already in memory, so the
# read itself is not counted twice (the read curve counts it): torch.load of torch.save bytes; safetensors' load_file
# of a file in memory with every page touched (it maps the file: no copy); DCP's per-item torch.load and copy into the
# preallocated tensor. Used where the profile's calibration has none; labelled "default". Measured with
# `ckplan calibrate` (384 MiB of fp32 tensors, median of 5) on the 2-core development VM, 2026-12-04
# (docs/benchmarks.md): torch.load 2.06-2.07 GB/s, safetensors 20.4-20.7 GB/s, dcp 1.54-1.55 GB/s in two runs.
DEFAULT_DESERIALIZE_BYTES_PER_S = {"torch.save": 2.06e9, "safetensors": 20.5e9, "dcp": 1.54e9}
TIGHT_FRACTION = 0.8  # overhead above 80% of the budget is 'tight'
DEFAULT_MODE: Literal["sync", "async"] = "sync"
