"""Validation: real PyTorch checkpoint saves, timed, against ckplan's prediction. Imports torch only here."""
