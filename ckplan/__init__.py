"""ckplan: how often a training run can safely checkpoint, and what storage that takes."""

__version__ = "0.1.0"
