"""The run directory, the one contract between a job and whatever watches it.

File names, metrics, checkpoints and the run lock; only ``checkpoint`` imports torch (pyproject.toml's
import contracts check it)."""
