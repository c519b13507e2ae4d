"""pytorchjob-kit trainer: the in-container DDP workload (`python -m trainer`)."""
