"""What the notebooks analyse: finished runs compared, scaling studies, all-reduce schedules, number formats."""
