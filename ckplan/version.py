"""ckplan's version, in a module of its own: every model stamps it, and none may import the package above them
(whose `__init__` reaches the API lazily)."""

__version__ = "0.1.0"
