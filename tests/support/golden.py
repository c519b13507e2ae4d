"""Refresh the golden snapshots (`make golden`); the diff is the review of a template change."""
from tests.support import scenarios


def main() -> None:
    for chart, name in scenarios.all_cases():
        path = scenarios.golden_path(chart, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scenarios.render_stream(chart, name))
        print(f"wrote {path.relative_to(scenarios.GOLDEN.parent.parent)}")


if __name__ == "__main__":
    main()
