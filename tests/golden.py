"""Refresh the golden snapshots (`make golden`); the diff is the review of a template change."""
from tests import scenarios


def main() -> None:
    scenarios.GOLDEN.mkdir(exist_ok=True)
    for name in scenarios.names():
        (scenarios.GOLDEN / f"{name}.yaml").write_text(scenarios.render_stream(name))
        print(f"wrote tests/golden/{name}.yaml")


if __name__ == "__main__":
    main()
