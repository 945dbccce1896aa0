"""tutorial_lib: the helper library behind the fast distributed ImageNet training course."""

__version__ = "0.1.0"
