"""Real tensor saves the framework's way, and this machine's serialiser calibration: what both the probe (its
replay, its calibration) and `validate` (its timed saves) run, below both. Nothing here imports torch at module
import: the save and calibration processes import it themselves."""
