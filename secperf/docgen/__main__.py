"""`python -m secperf.docgen [--check]`: write (or check) every generated page.

Each generator is a module of this package with `PAGE` and `main(argv)`;
tests/unit/test_generated_docs.py runs them all with --check, so a stale page fails.
"""

from __future__ import annotations

import importlib
import sys

# Every generator of a page in docs/ (a new one is a line here).
GENERATORS = (
    "secperf.docgen.scenarios",
    "secperf.docgen.scenario_format",
    "secperf.docgen.engine_protocol",
    "secperf.docgen.data_format",
    "secperf.docgen.pages",
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    failed = 0
    for name in GENERATORS:
        failed |= importlib.import_module(name).main(args)
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
