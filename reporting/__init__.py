"""Paper-style results, with no Flower imports: EMA, accuracy at round R, rounds to X% (`metrics`),
the comparison table (`table`), PNG plots (`plots`), a run folder's state (`status`) and the
trackers (`tracking`). The sweeps that run many runs and tabulate them are a driver above the
apps: `python -m experiments.sweep sweep.yaml`."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split
