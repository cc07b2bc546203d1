"""``python -m benchmarks [GROUP ...] [--quick] [--out DIR]``: see benchmarks/runner.py."""

from benchmarks.runner import main

raise SystemExit(main())
