"""`generator diagnose`: why a PyTorchJob is not progressing, and what to change.

snapshot.py reads what matters about one job from the API into plain objects (and writes and
reads them as a file, for bug reports and for tests); rules.py turns a snapshot into ranked
findings, each with a fix in the chart's values; report.py prints them."""
