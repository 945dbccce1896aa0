"""The training engine: configuration, data, models, optimisers, distributed setup, the trainer.

It knows nothing of who launched it: nothing here imports jobs, bench or what the notebooks call
(pyproject.toml's import contracts check it)."""
