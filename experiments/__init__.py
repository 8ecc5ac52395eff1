"""Drivers of whole runs, above the apps (nothing of the app imports them): sweeps of runs
(`python -m experiments.sweep sweeps/digits.yaml`) and a simulation SuperLink of one's own
(`superlink.LocalSuperLink`)."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
