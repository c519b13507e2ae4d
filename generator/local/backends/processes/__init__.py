"""The host-processes backend: each pod a process of this machine (backend.py)."""
