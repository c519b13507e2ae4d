"""A job on this machine: the plan (what each replica becomes) and the runner (processes)."""
