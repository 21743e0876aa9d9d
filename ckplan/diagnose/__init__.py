"""Is storage the bottleneck in a running job? Save times from logs, and live device counters."""
