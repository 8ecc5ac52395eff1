"""Every run-config key, defined once: type, default, allowed values and help text.

The same table drives validation (`run_config.resolve`), the `[tool.flwr.app.config]` section of
pyproject.toml (a test keeps them equal) and docs/configuration.md
(`python -m pages --markdown`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import methods
from feddata.specs import CLIENT_VAL_FRACTION, CUSTOM_CLASSES
from methods.registry import RegistryError
from methods.settings import PRESET, Key

METHODS = methods.method_names()  # the built-in methods; `methods.method_names()` is the live list

# Choices of the data and model keys; tests keep them equal to feddata.DATASET_BY_NAME,
# feddata.PARTITIONERS, feddata.AUGMENTATIONS and models.MODELS (written out here so this
# module needs no torch).
DATASETS = ("digits", "cifar10", "cifar100", "tiny-imagenet", "emnist", "fashion-mnist",
            "femnist", "celeba", "shakespeare", "custom")
PARTITIONERS = ("iid", "dirichlet-balanced", "lda", "natural", "shards")
# The datasets with a natural client id (feddata.specs: natural_id), which the natural split needs
NATURAL_ID_DATASETS = ("femnist", "celeba", "shakespeare")
AUGMENTATIONS = ("auto", "none", "crop-flip")
MODELS = ("mlp", "mlp-gcfed", "cnn", "resnet18", "vgg11", "vgg11-gcfed", "femnist-cnn",
          "celeba-cnn", "char-lstm")
INITS = ("default", "kaiming", "torchvision")  # models.INITS

_P = (PRESET,)

# The app's own keys, in the order the docs and the pyproject section list them within their
# topics (run_config/topics.py); each method's own knobs are declared in its module (the
# `settings` of its server rule or client part) and follow them.
APP_KEYS: tuple[Key, ...] = (
    # --- method and server update (docs/algorithms.md#server-round, #presets) ---
    Key("setup", str, "", "A paper set-up (run_config/setups/<name>.yaml, or a path to such a "
        "file): its method and values replace every key still at its default; '' = none.",
        "server"),
    Key("setup-overrides", str, "", "Keys (comma-separated) that keep the value given here "
        "even where it is their default: a set-up fills every key still at its default, so "
        "without this a set-up's value wins over a default given on purpose (e.g. "
        "local-momentum=0.0 under a set-up of 0.9); '' = none.", "server"),
    Key("method", str, "auto", "Named method (docs/algorithms.md#presets); sets every key "
        "whose value is 'preset'. 'auto' = the set-up's method, else fedacg.", "server",
        choices=("auto",),
        registry=methods.method_names),
    Key("server-rule", str, "preset", "How the replies and the server state become the next "
        "theta (docs/extending.md): the method's own, or another method's rule.", "server",
        choices=("preset",), registry=methods.server_rule_names, strategy=True),
    Key("client-objective", str, "preset", "The client parts (loss terms, gradient corrections) "
        "added to alpha * CE, comma-separated in the order applied; 'none' = plain CE; "
        "'preset' = the method's. Known parts: see docs/extending.md.", "client", strategy=True,
        topic="Method"),
    Key("aggregation", str, PRESET, "Client weights: proportional to examples, or uniform 1/|S_t|.",
        "server", choices=("preset", "examples", "uniform"), strategy=True, base="examples"),
    Key("alpha", float, 1.0, "Weight of the cross-entropy term (FedAGM's alpha).",
        "client", low=0.0, low_open=True, high=1e4, strategy=True, topic="Method"),
    Key("local-gc", str, PRESET, "Local GC of gradients: none, every layer, or the feature layers "
        "before the borderline.", "client", choices=("preset", "none", "all", "features"),
        strategy=True, topic="Method", base="none"),
    Key("global-gc", str, PRESET,
        "Global GC on the aggregated update: none, every layer, or only the "
        "layers past the borderline.", "server", choices=("preset", "none", "all", "classifier"),
        strategy=True, base="none"),
    Key("gc-borderline", float, "classifier", "Borderline between local and global GC: before the "
        "model's classifier, or a fraction gc_lambda of the parameter tensors.",
        "client", choices=("classifier",), low=0.0, high=1.0, low_open=True, strategy=True,
        topic="Method"),
    Key("gc-vectors", str, "center", "GC of 1-D tensors (biases, norm scales): centre them "
        "(GC-Fed code) or skip them (original GC).", "client", choices=("center", "skip"),
        strategy=True, topic="Method"),
    Key("allow-untested-combinations", bool, False, "Run a combination of a method with "
        "look-ahead or GC that no paper defines (docs/baselines.md#combinations); the run folder "
        "records it as untested.", "server", strategy=True),
    Key("lr", float, 0.05, "Local SGD learning rate.", "client", low=0.0, low_open=True, high=1e3,
        strategy=True),
    Key("lr-decay", float, 1.0, "Per-round decay: round t uses lr * lr-decay^(t-1).",
        "client", low=0.0, high=1.0, low_open=True, strategy=True),
    Key("lr-epoch-decay", float, 1.0, "Per-local-epoch decay on top of the round's: local epoch "
        "e = 0, 1, ... of round t uses lr * lr-decay^(t-1) * lr-epoch-decay^e (FedACG's code "
        "decays both by its local_lr_decay).", "client", low=0.0, high=1.0, low_open=True),
    Key("local-epochs", int, 2,
        "Local epochs E over the partition (used when local-iterations = 0).",
        "client", low=0, high=1000),
    Key("local-iterations", int, 0, "Local iterations K (mini-batches); 0 = use local-epochs.",
        "client", low=0, high=1_000_000),
    Key("batch-size", int, 16, "Local mini-batch size.", "client", low=1, high=100_000),
    Key("pad-to-full-batches", bool, False, "Pad each client's training data to a multiple of "
        "batch-size by repeating its first examples (GC-Fed's code), so every local epoch has "
        "full batches and class counts (FedLC) include the repeats; false = the last batch of "
        "an epoch may be short.", "client"),
    Key("local-momentum", float, 0.0, "Momentum of the local SGD optimizer.",
        "client", low=0.0, high=1.0, high_open=True, strategy=True),
    Key("weight-decay", float, 1e-3, "Weight decay of the local SGD optimizer.", "client", low=0.0,
        high=1e3),
    Key("grad-clip", float, 10.0, "Max gradient norm (clip_grad_norm_); 0 = no clipping.",
        "client", low=0.0, high=1e12),
    Key("device", str, "auto", "Training device of the ClientApp and the server's evaluation.",
        "client", choices=("auto", "cpu", "cuda"), resume_may_differ=True),
    Key("precision", str, "fp32", "Local training arithmetic: fp32; 'amp' = fp16 autocast with a "
        "GradScaler on a CUDA GPU (FedACG's code; a step whose gradients overflow is skipped), "
        "refused on the CPU; 'auto' = 'amp' where the client trains on a CUDA GPU, fp32 "
        "elsewhere.", "client", choices=("fp32", "amp", "auto")),
    # (the baselines' knobs are declared by their parts: methods/<name>.py, docs/baselines.md)
    # --- federation ---
    Key("num-server-rounds", int, 30, "Number of rounds T (with resume: the round to end at).",
        "federation", low=1, resume_may_differ=True, high=1_000_000),
    Key("fraction-train", float, 0.25, "Fraction of connected nodes sampled each round.",
        "federation", low=0.0, high=1.0, low_open=True),
    Key("min-train-nodes", int, 2, "Least number of nodes sampled each round.", "federation",
        low=1, high=1_000_000),
    Key("fraction-evaluate", float, 0.0, "Fraction of nodes for federated evaluation on their "
        "held-out split (0 = off).", "federation", low=0.0, high=1.0),
    Key("min-evaluate-nodes", int, 2, "Least number of nodes in federated evaluation.",
        "federation", low=1, high=1_000_000),
    Key("min-train-clients", int, 1, "Least number of valid train replies for a round to update "
        "the model; with fewer the round is skipped (theta and m unchanged).", "federation", low=1,
        high=1_000_000, strategy=True, topic="Reliability"),
    Key("max-skipped-rounds", int, 10, "End the run as failed when this many rounds in a row "
        "aggregate no reply (every reply failed, timed out or was dropped: the model stopped "
        "moving); 0 = never. A run that aggregated no round at all fails at its end either way "
        "(docs/results.md#runs-that-learn-nothing).", "federation", low=0, high=1_000_000,
        strategy=True, topic="Reliability"),
    Key("max-update-norm", float, 0.0, "Drop a train reply whose update norm ||w_i - phi|| "
        "(all float tensors) exceeds this; 0 = no limit.", "federation", low=0.0, high=1e30,
        strategy=True, topic="Reliability"),
    Key("round-timeout", float, 600.0, "Seconds to wait for the replies of one round; missing "
        "replies are counted as timeouts.", "federation", low=0.0, low_open=True,
        resume_may_differ=True, high=1e7, topic="Reliability"),
    Key("node-wait-timeout", float, 120.0, "Seconds to wait for enough nodes to connect before "
        "failing with an error.", "federation", low=0.0, low_open=True, resume_may_differ=True,
        high=1e7, strategy=True, topic="Reliability"),
    # high: the clients seed their batch order with (seed * 1000003 + round) * 100003 + partition,
    # which must stay below 2^64 (torch's seed range)
    Key("seed", int, 0, "Seed of the data split, the partitions, node sampling and model init.",
        "federation", low=0, high=100_000_000, strategy=True),
    Key("dynamic-replace-prob", float, 0.0, "Dynamic clients (FedACG Table 3): every "
        "dynamic-replace-every rounds each client is replaced with this probability by a client "
        "holding a fresh data partition (0 = off; not with fedadam/fedyogi/fedadagrad).",
        "federation", low=0.0, high=1.0, strategy=True),
    Key("dynamic-replace-every", int, 100, "Rounds between client replacements (FedACG: 100).",
        "federation", low=1, high=1_000_000, strategy=True),
    Key("dynamic-pool-factor", float, 2.0, "With dynamic clients, the data is split into "
        "round(factor * num-partitions) partitions, of which the clients hold num-partitions at a "
        "time (FedACG: 500 for 250 clients).", "federation", low=1.0, high=1e3, strategy=True),
    Key("simulation-fast-poll", bool, True, "In a simulation, answer the engine's per-node "
        "message poll at once for nodes with no message (the same messages are delivered; "
        "docs/performance.md#many-clients); false = Flower's own poll, whose "
        "cost grows with nodes x messages in flight.", "federation", resume_may_differ=True),
    # --- robustness: what one client can do to the model (docs/security.md) ---
    Key("update-norm-ratio", float, 30.0, "Drop a train reply whose update norm (of w_i - phi) "
        "exceeds this many times the median update norm of the round's replies; 0 = off.",
        "robustness", low=0.0, high=1e12, strategy=True),
    Key("update-clip-ratio", float, 0.0, "Scale a train reply's update (w_i - phi) down to this "
        "many times the median update norm of the round's replies where it is longer; 0 = off "
        "(honest updates reach 15x the median: docs/security.md#honest-runs).",
        "robustness", low=0.0, high=1e12, strategy=True),
    Key("record-norm-ratio", float, 30.0, "Drop a train reply whose extra record (e.g. "
        "SCAFFOLD's scaffold-dc, FedDC's feddc-dg) has a norm above this many times the median "
        "norm of the same record in the round's replies; 0 = off.", "robustness", low=0.0,
        high=1e12, strategy=True),
    Key("num-examples-ratio", float, 10.0, "Weigh a reply's claimed num-examples at most this "
        "many times the median claim of the round's replies; 0 = off.", "robustness", low=0.0,
        high=1e12, strategy=True),
    Key("num-examples-check", bool, True, "Weigh a reply's claimed num-examples at most as the "
        "largest client partition of the split the server computes at the start "
        "(partitions.json size-max); false = trust the claims up to num-examples-ratio.",
        "robustness"),
    Key("robust-aggregator", str, "mean", "Rule that turns the round's updates into the "
        "aggregate d: the weighted mean, or the rule of Flower's FedMedian, FedTrimmedAvg, Krum, "
        "MultiKrum or Bulyan; server momentum, look-ahead and global GC then apply to d.",
        "robustness", choices=("mean", "median", "trimmed-mean", "krum", "multikrum", "bulyan"),
        strategy=True),
    Key("trim-fraction", float, 0.2, "trimmed-mean: fraction of values cut at each end per "
        "coordinate (FedTrimmedAvg's beta).", "robustness", low=0.0, high=0.5, high_open=True,
        strategy=True),
    Key("num-malicious", int, 0, "krum / multikrum / bulyan: number f of malicious clients "
        "per round to tolerate (bulyan needs at least 4f + 3 replies).", "robustness", low=0,
        high=1_000_000, strategy=True),
    Key("multikrum-select", int, 0, "multikrum: number of updates averaged; 0 = replies - f.",
        "robustness", low=0, high=1_000_000, strategy=True),
    # high: the noise std z * C / n is then at most 1e6 per coordinate, which float32 (max
    # 3.4e38) holds in theta and in its squared norms over 1e8 parameters (1e12 each, 1e20 in
    # all; the server screens and clips by such norms), with room for momentum and many rounds;
    # 1e308 each made theta NaN in round 1 (docs/security.md#runs-run-folders-and-client-state).
    Key("dp-clipping-norm", float, 0.0, "Server-side DP with fixed clipping (Flower's "
        "DifferentialPrivacyServerSideFixedClipping): clip every update to this norm; 0 = off. "
        "At most 1000 (an update that long moves weights of size 1 a thousandfold), so that the "
        "noise std stays within what float32 holds.", "robustness", low=0.0, high=1e3,
        strategy=True),
    Key("dp-noise-multiplier", float, 0.0, "Server-side DP: add Gaussian noise of std "
        "multiplier * dp-clipping-norm / replies to the aggregate. At most 1000: with "
        "dp-clipping-norm at most 1000 the std is then at most 1e6 per coordinate, which "
        "float32 holds in theta and in its squared norms (1e308 made theta NaN).", "robustness",
        low=0.0, high=1e3, strategy=True),
    # --- data ---
    Key("dataset", str, "digits", "Dataset (docs/data.md): scikit-learn's bundled 8x8 "
        "digits (offline), a hub dataset / its local copy, or 'custom': images of your own, "
        "declared by the custom-* keys (own data only).", "data", choices=DATASETS),
    Key("dataset-path", str, "", "Local copy of the dataset (a save_to_disk folder, a folder "
        "of parquet/csv files in the hub's format, or, for fashion-mnist, a folder of its IDX "
        "files such as /usr/share/datasets/fashion-mnist); '' = the Hugging Face hub.", "data"),
    Key("client-data", str, "partitions", "Where each client's data comes from: 'partitions' = "
        "a partition of the dataset picked by the node's client-id (simulations, demos); "
        "'own' = every node trains on its own folder (node config data-path) and the server "
        "never loads the training data (docs/deployment.md#own-data).", "data",
        choices=("partitions", "own")),
    Key("test-data", str, "dataset", "The server's test set: 'dataset' = the dataset's test "
        "split; 'none' = no server test set, the run's metric is federated evaluation "
        "(fed-acc: the clients' held-out data, needs fraction-evaluate > 0); else a folder on the "
        "server in a format of own data (image folder, hub parquet, save_to_disk, IDX files).",
        "data"),
    Key("num-clients", int, 0, "N, the number of clients of the federation, for the rules that "
        "need it (SCAFFOLD, FedDyn, FedVARP) and for nodes without a client id; 0 = the "
        "num-partitions (num-clients) the nodes report, else the nodes connected at the start.",
        "data", low=0, high=1_000_000, strategy=True),
    Key("custom-classes", int, 0, "dataset = 'custom': the number of classes (labels 0 .. "
        "classes-1).", "data", low=0, high=CUSTOM_CLASSES.high),
    Key("custom-shape", str, "", "dataset = 'custom': the images' shape C,H,W (C = 1 or 3), "
        "e.g. '3,32,32'.", "data"),
    Key("custom-mean", str, "", "dataset = 'custom': per-channel mean for normalization, "
        "comma-separated, pixel values scaled to [0, 1]; '' = 0 (no centering).", "data"),
    Key("custom-std", str, "", "dataset = 'custom': per-channel std for normalization, "
        "comma-separated; '' = 1.", "data"),
    Key("partitioner", str, "dirichlet-balanced", "Client split: iid, FedACG's balanced Dirichlet "
        "(equal sizes, label prior ~ Dir(dirichlet-alpha)), GC-Fed's unbalanced LDA (each class "
        "spread ~ Dir(lda-alpha)), natural (one writer/speaker/celebrity per client) or shards "
        "(label-sorted shards, McMahan).", "data", choices=PARTITIONERS),
    Key("dirichlet-alpha", float, 0.3, "Concentration of the balanced Dirichlet split.",
        "data", low=0.0, low_open=True, high=1e6),
    Key("lda-alpha", float, 0.1, "Concentration of the LDA split.", "data", low=0.0, low_open=True,
        high=1e6),
    Key("lda-min-size", int, 10, "Least examples per client in the LDA split.", "data", low=0,
        high=1_000_000_000),
    Key("lda-self-balancing", bool, False, "LDA split: stop giving a class's examples to clients "
        "already above the average size (FedLab's split, used by GC-Fed's code).", "data"),
    Key("shards-per-client", int, 2, "Shards per client in the shards split.", "data", low=1,
        high=1_000_000),
    Key("test-fraction", float, 0.2, "Share held out as the server's test set where the dataset "
        "has no test split (digits; FEMNIST and Shakespeare: per writer/speaker).",
        "data", low=0.0, high=1.0, low_open=True, high_open=True),
    Key("test-max-examples", int, 0, "Evaluate on a fixed random subset of at most this many test "
        "examples; 0 = the whole test set.", "data", low=0, high=1_000_000_000),
    Key("client-val-fraction", float, 0.1,
        "Share of each partition held out for federated evaluation.",
        "data", low=CLIENT_VAL_FRACTION.low, high=CLIENT_VAL_FRACTION.high,
        high_open=CLIENT_VAL_FRACTION.high_open),
    Key("augment", str, "auto", "Training augmentation on the training device: random crop with "
        "padding + horizontal flip, or none; 'auto' = crop-flip for CIFAR and Tiny-ImageNet, none "
        "for the others. Never at test time.", "data", choices=AUGMENTATIONS),
    Key("augment-padding", int, 4, "Zero padding of the random crop, in pixels.", "data", low=0,
        high=1000),
    Key("augment-rotation", float, 0.0, "Also rotate training images by up to this many degrees "
        "(FedACG's code: 10) when augmenting; 0 = no rotation.", "data", low=0.0, high=180.0),
    # --- model ---
    Key("model", str, "cnn", "Model: MLP (3 fc, 200-200; mlp-gcfed: GC-Fed's 512-256), "
        "GC-Fed/McMahan CNN, ResNet-18-GN, VGG-11 (no BN; vgg11: 512-512 head on a global pool, "
        "vgg11-gcfed: GC-Fed's torchvision shape, 7x7 pool, 4096-4096 head with dropout), LEAF's "
        "FEMNIST CNN (2 conv), CelebA CNN (4 conv, GroupNorm), Shakespeare char LSTM.", "model",
        choices=MODELS),
    Key("init", str, "default", "Initial weights of the global model: PyTorch's layer defaults; "
        "'kaiming' = GC-Fed's CNN/MLP init (Kaiming-normal fan-in, zero biases); 'torchvision' = "
        "torchvision's VGG/ResNet init as GC-Fed's code runs it (docs/data.md#models).", "model",
        choices=INITS),
    Key("gn-groups", int, 2, "GroupNorm groups of ResNet-18 (2 in FedACG, 32 in GC-Fed).",
        "model", low=1, high=4096),
    # --- output ---
    Key("eval-every", int, 1, "Evaluate the global model on the test set every this many rounds "
        "(and after the last).", "output", low=1, resume_may_differ=True, high=1_000_000),
    Key("acc-at-rounds", str, "", "Rounds R at which the summary reports the EMA accuracy, "
        "comma-separated (e.g. '500,1000'); empty = half-way and the last round.", "output",
        resume_may_differ=True),
    Key("target-accs", str, "80,90", "Target accuracies in percent, comma-separated: the summary "
        "reports the first round whose EMA reaches each ('T+' if none does).", "output",
        resume_may_differ=True),
    Key("out-dir", str, "~/fedacg-gc-runs", "Folder for run outputs (results.json, final model); "
        "'~' expands to the home of the ServerApp process.", "output", resume_may_differ=True),
    Key("run-name", str, "", "Name of this run's sub-folder (a plain folder name: at most 255 "
        "bytes, no '/', '\\' or control characters); empty = <method>-<date>-<time> (a new "
        "folder for every run). A run-name whose folder holds a finished run, or is in use by a "
        "running run, is refused; with resume, it must be the resumed run's own (empty: kept).",
        "output", resume_may_differ=True),
    Key("checkpoint-every", int, 10, "Write <run folder>/checkpoint.pt every this many rounds "
        "and after the last (atomically); 0 = never.", "output", low=0, resume_may_differ=True,
        high=1_000_000),
    Key("resume", str, "", "Continue a run from a checkpoint: '' = start fresh, 'latest' = the "
        "checkpoint of out-dir/run-name (run-name set) or of the one unfinished run without a "
        "run-name under out-dir (refused when there are several), or the path of a checkpoint.pt "
        "or of its run folder.", "output", resume_may_differ=True),
    Key("log-level", str, "info", "Console detail: 'info' = one line per round; 'debug' = also "
        "the per-round lines of the strategy and of Flower (sampling, aggregation, metrics).",
        "output", choices=("info", "debug"), resume_may_differ=True),
    Key("plot-every", int, 10, "Redraw the run folder's PNG plots every this many rounds (and "
        "after the last); 0 = only after the last.", "output", low=0, resume_may_differ=True,
        high=1_000_000),
    Key("tensorboard", bool, False, "Also write every round's metrics as TensorBoard events to "
        "<run folder>/tensorboard (needs the 'tensorboard' extra).", "output",
        resume_may_differ=True),
    Key("wandb", str, "off", "Also log every round's metrics to Weights & Biases: 'offline' "
        "writes <run folder>/wandb (upload later with `wandb sync`), 'online' sends them as it "
        "goes (needs the 'wandb' extra).", "output", choices=("off", "offline", "online"),
        resume_may_differ=True),
    Key("wandb-project", str, "fedacg-gc", "W&B project of the run (with wandb on).", "output",
        resume_may_differ=True),
)

_gathered: tuple[tuple, tuple[Key, ...], dict[str, Key]] | None = None  # (a cache)


def _gather() -> tuple[tuple[Key, ...], dict[str, Key]]:
    """Every run-config key: the app's own (APP_KEYS), then the knobs the registered methods'
    server rules and client parts declare (their `settings`), in the order they registered;
    and the same by name."""
    global _gathered
    owners = methods.setting_owners()  # (the same tuple while the registry is unchanged)
    if _gathered is None or _gathered[0] is not owners:
        taken = {key.name: "run_config/schema.py" for key in APP_KEYS}
        for key, owner in owners:
            if key.name in taken:
                raise RegistryError(f"{owner.__name__} declares the run-config key "
                                    f"'{key.name}', which {taken[key.name]} declares already: "
                                    "give the knob another name")
            taken[key.name] = owner.__name__
        keys = APP_KEYS + tuple(key for key, _ in owners)
        _gathered = owners, keys, {key.name: key for key in keys}
    return _gathered[1], _gathered[2]


class _Keys(Sequence):
    """Every run-config key (`_gather`), live over the registry (a method may be registered
    after this module is imported)."""

    def __getitem__(self, index):
        return _gather()[0][index]

    def __len__(self) -> int:
        return len(_gather()[0])

    def __iter__(self) -> Iterator[Key]:
        return iter(_gather()[0])


class _KeysByName(Mapping):
    """name -> Key of every run-config key, live over the registry."""

    def __getitem__(self, name: str) -> Key:
        return _gather()[1][name]

    def __iter__(self) -> Iterator[str]:
        return iter(_gather()[1])

    def __len__(self) -> int:
        return len(_gather()[1])


KEYS: Sequence[Key] = _Keys()
KEYS_BY_NAME: Mapping[str, Key] = _KeysByName()

# Keys that no longer exist, each with what a config that still names one is told (resolve and
# the set-up loader refuse them with this message, not as unknown keys; a checkpoint's saved
# config drops them: server_app/checkpoint.py).
REMOVED_KEYS: dict[str, str] = {
    "server-pass": "run config 'server-pass' was removed: the server's pass over the replies "
    "(update norms and weighted mean) is PyTorch's now, the compiled C loop is gone, and there "
    "is nothing to choose (docs/performance.md#the-servers-pass). Delete the 'server-pass' key "
    "from your run config (pyproject.toml's [tool.flwr.app.config], --run-config, a set-up or "
    "sweep file).",
}
