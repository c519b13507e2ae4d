"""Refresh the golden snapshots (`make golden`); the diff is the review of a template change (or,
for tests/golden/convert/, of a change in what `convert` reports)."""
from tests.support import conversions, scenarios


def main() -> None:
    for chart, name in scenarios.all_cases():
        path = scenarios.golden_path(chart, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scenarios.render_stream(chart, name))
        print(f"wrote {path.relative_to(scenarios.GOLDEN.parent.parent)}")
    conversions.FOLDER.mkdir(parents=True, exist_ok=True)
    for case in conversions.cases():
        path = conversions.golden_path(case)
        path.write_text(conversions.text(case))
        print(f"wrote {path.relative_to(scenarios.GOLDEN.parent.parent)}")


if __name__ == "__main__":
    main()
