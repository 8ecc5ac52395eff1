"""Paper-style results, with no Flower imports: EMA, accuracy at round R, rounds to X% (`metrics`),
the comparison table (`table`), PNG plots (`plots`) and sweeps of whole runs (`python -m
reporting.sweep sweep.yaml`)."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
# isort: split
