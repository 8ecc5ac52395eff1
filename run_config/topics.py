"""Which topic each run-config key is listed under in docs/configuration.md.

One ordered mapping: a topic's title, one sentence about it, and its keys in the order they are
listed. A key that no topic names is listed under "Other" (the page still builds): add its name to
the topic it belongs to.
"""

from __future__ import annotations

TOPICS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Method",
     "The method and the server update ([algorithms](algorithms.md#server-round)); `setup` "
     "picks a paper set-up ([set-ups](setups.md)).",
     ("setup", "method", "server-rule", "client-objective", "lookahead", "lam", "eta",
      "aggregation", "beta", "alpha", "local-gc",
      "global-gc", "gc-borderline", "gc-vectors", "fedopt-tau",
      "allow-untested-combinations")),
    ("Baselines",
     "The knobs of the baselines the papers compare with ([baselines](baselines.md)).",
     (  # one line per group of methods
      "moon-mu", "moon-tau", "lc-tau", "ntd-beta", "ntd-tau", "ntd-form", "decorr-beta",
      "decorr-features",  # MOON, FedLC, FedNTD, FedDecorr
      # FedSOL, FedMLB
      "sol-rho", "mlb-lambda1", "mlb-lambda2", "mlb-temperature",
      "feddyn-alpha", "feddc-alpha", "feddc-steps",  # SCAFFOLD, FedDyn, FedDC
      # FedCM, FedVARP, FedPAQ
      "fedcm-alpha", "fedvarp-memory-mb", "uplink-bits", "uplink-tensors",
      )),
    ("Local training",
     "The clients' optimizer ([local update](algorithms.md#local-update)).",
     ("lr", "lr-decay", "lr-epoch-decay", "local-epochs", "local-iterations", "batch-size",
      "pad-to-full-batches", "local-momentum", "weight-decay", "grad-clip", "device",
      "precision")),
    ("Data and model",
     "Dataset, client split, augmentation and model ([data](data.md)).",
     ("dataset", "dataset-path", "client-data", "test-data", "num-clients", "custom-classes",
      "custom-shape", "custom-mean", "custom-std", "partitioner", "dirichlet-alpha", "lda-alpha",
      "lda-min-size",
      "lda-self-balancing", "shards-per-client", "test-fraction", "test-max-examples",
      "client-val-fraction", "augment", "augment-padding", "augment-rotation", "model", "init",
      "gn-groups")),
    ("Server",
     "Rounds, client sampling, seeds and the dynamic client population.",
     ("num-server-rounds", "fraction-train", "min-train-nodes", "fraction-evaluate",
      "min-evaluate-nodes", "seed", "dynamic-replace-prob", "dynamic-replace-every",
      "dynamic-pool-factor", "simulation-fast-poll")),
    ("Reliability",
     "What the server does with late, failed or bad replies ([results](results.md)).",
     ("min-train-clients", "max-skipped-rounds", "max-update-norm", "round-timeout",
      "node-wait-timeout")),
    ("Robustness",
     "How far one client can move the model: outlier and weight caps, robust aggregators and "
     "server-side differential privacy ([security](security.md)).",
     ("update-norm-ratio", "update-clip-ratio", "record-norm-ratio", "num-examples-ratio",
      "num-examples-check", "robust-aggregator", "trim-fraction", "num-malicious",
      "multikrum-select", "dp-clipping-norm", "dp-noise-multiplier")),
    ("Outputs",
     "Evaluation, the summary's numbers, run folders, checkpoints and resume "
     "([results](results.md), [reporting](algorithms.md#reporting)).",
     ("eval-every", "acc-at-rounds", "target-accs", "out-dir", "run-name", "checkpoint-every",
      "resume", "log-level", "plot-every", "tensorboard", "wandb", "wandb-project")),
)
OTHER = ("Other", "Keys not yet given a topic in `run_config/topics.py`.")


def grouped(names: list[str]) -> list[tuple[str, str, list[str]]]:
    """(title, sentence, keys) per topic that has keys, in TOPICS order; unknown keys in Other,
    in the order given; keys a topic names that do not exist are left out."""
    known = set(names)
    out, placed = [], set()
    for title, sentence, keys in TOPICS:
        present = [k for k in keys if k in known and k not in placed]
        placed.update(present)
        if present:
            out.append((title, sentence, present))
    rest = [k for k in names if k not in placed]
    if rest:
        out.append((*OTHER, rest))
    return out
