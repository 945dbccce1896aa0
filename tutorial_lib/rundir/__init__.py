"""The run directory, the one contract between a job and whatever watches it.

File names, metrics, checkpoints and the run lock; nothing here needs torch at import time."""
