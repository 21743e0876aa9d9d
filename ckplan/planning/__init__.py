"""The planner: pure functions from a plan and a storage profile to save times, intervals and what-ifs."""
