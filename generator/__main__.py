import sys

try:
    from generator.cli import main
except ModuleNotFoundError as exc:  # e.g. the system Python, without the venv's packages
    print(f"error: the Python package {exc.name!r} is missing from {sys.executable}; run `make venv` and use "
          ".venv/bin/python -m generator (or .venv/bin/pytorchjob-kit)", file=sys.stderr)
    sys.exit(1)

sys.exit(main())
