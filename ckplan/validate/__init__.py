"""Real PyTorch saves: validation against the prediction, the probe's framework-saver replay, and this
machine's calibration. Imports torch only here, and only in the save processes."""
