"""pytorchjob-kit generator: job descriptions to validated chart values, manifests and runs."""
