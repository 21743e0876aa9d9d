"""Sizing: what one checkpoint save writes (pure functions, no I/O besides the packaged catalog)."""
