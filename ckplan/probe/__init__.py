"""Probing storage targets. Each target kind (filesystem, and later S3 and many
hosts) turns a target into a StorageProfile; I/O lives here, not in the planner."""
