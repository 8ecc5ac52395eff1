"""The pages generated from the one definition of every key (`run_config/schema.py` and the
methods' `settings`, `presets.py`, `topics.py`, `setups/*.yaml`). `python -m pages` writes every
generated file (`pages.generated`); each part is printed by

    python -m pages --markdown      docs/configuration.md (every key, grouped by topic)
    python -m pages --methods       the methods table (in docs/methods.md)
    python -m pages --methods-page  docs/methods.md
    python -m pages --setups        the paper set-ups table (in docs/setups.md)
    python -m pages --setups-page   docs/setups.md
    python -m pages --toml          the [tool.flwr.app.config] section of pyproject.toml
"""

from run_config.presets import PRESETS, base_preset
from run_config.schema import KEYS, KEYS_BY_NAME, Key
from run_config.setups import load_setup, setup_names
from run_config.topics import grouped


def cell(text: str) -> str:
    """`text` safe in a GitHub Markdown table cell: `|` escaped, `<`/`>` as entities (no HTML
    tags), `*` escaped (no emphasis)."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
            .replace(">", "&gt;").replace("*", "\\*"))


def default_text(k: Key) -> str:
    if isinstance(k.default, bool):
        return f"`{str(k.default).lower()}`"
    if isinstance(k.default, str):
        return f"`'{k.default}'`"
    return f"`{k.default}`"


def allowed_text(k: Key) -> str:
    """The allowed values: a range (or "any string") first, then the literal values as code
    spans, comma-separated."""
    parts = k.allowed().split(" | ")
    literal = [f"`{p}`" for p in parts if p.startswith("'") or p in ("true", "false")]
    other = [p for p in parts if not (p.startswith("'") or p in ("true", "false"))]
    return " or ".join(other + ([", ".join(literal)] if literal else []))


CONFIGURATION_INTRO = """# Configuration

Every run-config key, with its default, its allowed values and what it does. Each key is defined
once (type, default, range, help, topic): the app's own in `run_config/schema.py`, a method's own
knobs in its module in `methods/` ([extending](extending.md#a-methods-knobs)); the same
definition validates a run, makes the `[tool.flwr.app.config]` section of `pyproject.toml` and
this page (by the topics of `run_config/topics.py`; `python -m pages` writes both, and a test
keeps them equal to what it would write). A wrong key or value stops
the run before anything starts, with an error naming the key and what is allowed.

Set keys with `flwr run . --run-config "KEY=VALUE KEY=VALUE"`: strings in single quotes
(`method='gcfed'`), numbers and `true`/`false` bare. The keys whose default is `'preset'` take the
value of the chosen `method` ([presets](algorithms.md#presets)); giving one a value overrides the
method. A paper set-up (`setup`) fills in every key still at its default ([set-ups](setups.md)).
The federation itself (number of clients, resources) is Flower's `--federation-config`, not a
run-config key ([performance](performance.md)).
"""


def markdown() -> str:
    """docs/configuration.md: one table per topic."""
    topics = grouped(KEYS)
    out = [CONFIGURATION_INTRO.rstrip(), "",
           "Topics: " + ", ".join(f"[{t}](#{t.lower().replace(' ', '-')})" for t, _, _ in topics)
           + "."]
    for title, sentence, names in topics:
        out += ["", f"## {title}", "", sentence, "",
                "| key | default | allowed | what it does |", "| --- | --- | --- | --- |"]
        for name in names:
            k = KEYS_BY_NAME[name]
            out.append(f"| `{k.name}` | {default_text(k)} | {allowed_text(k)} | {cell(k.help)} |")
    return "\n".join(out) + "\n"


def methods() -> str:
    """The method table, from the methods registry (one module per method): each method's server
    rule, client parts and the preset values it sets away from plain FedAvg's."""
    import methods as registry

    base = base_preset()
    rows = ["| method | server rule | client parts | sets | paper |", "| --- " * 5 + "|"]
    for name in PRESETS:
        method = registry.METHODS[name]
        sets = ", ".join(f"`{k}` {str(v).lower() if isinstance(v, bool) else v}"
                         for k, v in method.preset.items() if k in base and v != base[k])
        rows.append(f"| `{name}` | {method.server_rule} | "
                    f"{', '.join(method.client_parts) or '-'} | {sets or '-'} | {method.paper} |")
    return "\n".join(rows)


METHODS_INTRO = """# Methods

Every method `method` names (`flwr run . --run-config "method='gcfed'"`), from the methods
registry (one module per method in `methods/`, [extending](extending.md#add-a-method)): its
server rule, its client parts, the keys it sets away from plain FedAvg's values (the keys whose
default is `'preset'`; giving one a value overrides the method) and its paper. What the keys
mean: [configuration](configuration.md#method); the formulas: [algorithms](algorithms.md); the
baselines as their authors' codes run them: [baselines](baselines.md).

This page is generated: `python -m pages` (a test keeps it equal to what that writes).
"""


def methods_page() -> str:
    """docs/methods.md: the methods table."""
    return METHODS_INTRO + "\n" + methods() + "\n"


def setups() -> str:
    """The paper set-ups table: one row per `setups/*.yaml`."""
    rows = ["| set-up | paper | dataset | model | split | clients (per round) | rounds |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in setup_names():
        s = load_setup(name)
        rc = s["run-config"]
        split = rc.get("partitioner", "dirichlet-balanced")
        alpha = {"dirichlet-balanced": "dirichlet-alpha", "lda": "lda-alpha"}.get(split)
        split += f" {rc.get(alpha, KEYS_BY_NAME[alpha].default)}" if alpha else ""
        frac = rc.get("fraction-train", KEYS_BY_NAME["fraction-train"].default)
        per_round = max(int(s["num-supernodes"] * frac + 1e-9), rc.get("min-train-nodes", 2))
        rows.append(
            f"| `{name}` | {cell(s['paper'])} | {rc.get('dataset', 'digits')} "
            f"| {rc.get('model', 'cnn')} | {split} | {s['num-supernodes']} ({per_round}) "
            f"| {rc.get('num-server-rounds', 30)} |")
    return "\n".join(rows)


SETUPS_INTRO = """# Paper set-ups

Each experiment of the papers is a YAML file in `run_config/setups/` (shipped inside the app):
its method, dataset, model, split, local training and federation size, the notes on what had to
be inferred, and the numbers the paper reported for every method in its rows
(`reported.rows`), so results can be put beside them. One command runs any set-up of the table
below: put its name in `SETUP` and its number of clients in `N`.

```bash
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
flwr run . --stream --run-config "setup='SETUP'" --federation-config "num-supernodes=N"
```

For example (`python -m run_config --command NAME` prints a set-up's command):

```bash
flwr run . --stream --run-config "setup='fedacg-t1a-cifar10'" \\
    --federation-config "num-supernodes=100"
flwr run . --stream --run-config "setup='fedacg-t1a-cifar10' method='fedavg'" \\
    --federation-config "num-supernodes=100 client-resources-num-gpus=0.25"   # a baseline, on a GPU
```

`setup` names a shipped set-up, or a path to your own YAML file in the same format (it must
exist where the ServerApp and the ClientApps run; shipped set-ups travel inside the app). Its
method and values replace every run-config key that still holds its default; any key given
another value on the command line wins (`method`, `lr`, `num-server-rounds`, `dataset-path`,
...). Flower hands the ServerApp defaults and command-line values alike, so a key given exactly
its default value keeps the set-up's value, unless `setup-overrides` names it ([a default given
on purpose](#a-default-given-on-purpose)). `method` defaults to `auto` (the set-up's method;
`fedacg` without a set-up). The federation size is not a run-config value: pass the
`num-supernodes` of the table (the server warns when the number of connected nodes differs).
The app's ratio limits on one reply's influence (`update-norm-ratio`, `update-clip-ratio`,
`record-norm-ratio`, `num-examples-ratio`; [security](security.md)) are off in every set-up, as
the papers' servers apply every update as it came. A set-up's `row-config` holds values for one
method's row only (GC-Fed's tables clip FedDyn alone, at norm 10, as its authors' code does). A
set-up never sets the keys a method sets (`lam`, `beta`, `local-gc`, ...), so every method runs
on every set-up. The YAML files are checked by the run-config schema when they are loaded (and by
the tests). Where a set-up's values come from, and what had to be inferred:
[paper set-ups](algorithms.md#paper-set-ups) and
[paper versus code](algorithms.md#paper-versus-code).
None of these set-ups has been run to the end here (they need the hub datasets and a GPU); the
`reported.rows` are the papers' numbers, not ours. How close each set-up is to its authors' code,
element by element, and what still differs: [fidelity](#fidelity).

### A default given on purpose

To run a set-up with a key at its default where the set-up sets another value (no local momentum
under GC-Fed's 0.9; no weight decay), name the key in `setup-overrides`:

```bash
flwr run . --stream --run-config "setup='gcfed-t5-fmnist-5of100-lda0.1' local-momentum=0.0 \\
    lr=0.1 setup-overrides='local-momentum'" --federation-config "num-supernodes=100"
```

A sweep refuses a cell whose value a set-up would replace this way, naming the key and this
fix (`sweeps/momentum-grid-fmnist.yaml` uses it for its columns without local momentum).

This page is generated: `python -m pages` (a test keeps it equal to what that writes).
"""


REHEARSAL_INTRO = """## Rehearsal at full size

Every set-up rehearsed at its own size on this project's CPU box before anyone rents a GPU:
`python -m benchmarks.rehearse` runs a set-up through `flwr run` (a simulation SuperLink of its
own) with its federation size, model, batch, split and method for 2 rounds, on a stand-in copy
of its dataset made once by `python -m benchmarks.standins` (the hub copy's row counts, image
sizes, columns and splits, and LEAF's natural ids: 3,597 FEMNIST writers, 1,129 Shakespeare
speakers, 8,192 CelebA training celebrities, with realistic per-id counts; smooth random
pixels). `--quick` cuts the local steps to 2 and the server's evaluation to a fixed subset of
512 test examples, never the population, the data or the model; the projection scales them back
(below). Commands:

```bash
python -m benchmarks.standins      # the stand-ins, once: 2.7 GB (+ 3.5 GB of datasets' cache)
python -m benchmarks.rehearse --quick --json docs/rehearsal.json   # every set-up, quick
python -m benchmarks.rehearse --quick --stateful --stateful-setup fedacg-t1b-cifar10
python -m benchmarks.rehearse --setups fedacg-t1a-cifar10 --methods fedavg,moon  # full rounds
```

The figures are those of `docs/rehearsal.json` (round 2 of each run; round 1 starts Ray and its
actors): s/round split into the clients' training (mean client seconds x clients), the server's
evaluation and the rest (messages, aggregation, loading partitions); s/step one local step;
peak host MB all processes of the run (the resident sizes of the SuperLink's process tree
summed, sampled every 2 s); disk MB what the run wrote (its folder, the partition cache, the
per-client state files); MB/round the training messages, down + up; projected h the full run on
this machine: num-server-rounds x (clients x full local steps x s/step + the full test set's
evaluation / eval-every + the rest). The GPU column is left for a machine that has one.
"""


REHEARSAL_NOTES = """What the rehearsal found (quick pass on 2 CPU cores (x86_64), 24 GiB, no GPU,
torch 2.13.0+cpu, flwr 1.41.0, Python 3.11.7, nothing else running but for the last three rows;
one run per row, so a timing is good to about 2x; the memory and disk figures are firm):

* **The whole quick pass** is one command: `python -m benchmarks.rehearse --quick --setups all
  --stateful --stateful-setup fedacg-t1b-cifar10` ran all 52 set-ups and the six stateful
  baselines at 500 clients, 58 runs, each with its own SuperLink and Ray start, in 57.1 minutes;
  every run ended ok. SCAFFOLD, FedDyn and FedVARP also ran at 1,000 clients (the last three
  rows, 11.6 minutes, on a busy machine). The first pass found one break, now fixed:
  `gcfed-t5-cifar10-5of200-lda0.05` failed to split (CIFAR-10 over 200 clients at LDA 0.05
  leaves no client empty about once in 650 draws, and flwr-datasets' Dirichlet partitioner
  stops after 10; the `lda` split now draws again as the authors' FedLab code does,
  [data](data.md#partitioners)).
* **Memory.** Every set-up fits 24 GB at its own size. The largest peaks: VGG-11 (GC-Fed's
  `vgg11-gcfed`, 129 M parameters, 516 MB a copy: 5.2 GB of messages a round) at 14.5-16.7
  GB, Shakespeare (4.2 M rows, 1,129 speakers) at 8.1 GB, ResNet-18 on Tiny-ImageNet at 6.3-7.0
  GB; ResNet-18 on CIFAR at 3.7-4.7 GB; the CNN, MLP and LEAF image set-ups at 2.6-5.0 GB.
* **Time.** ResNet-18 set-ups project to 18-84 hours on this CPU on CIFAR and 113-401 on
  Tiny-ImageNet (a local step took 0.15-0.6 s on CIFAR, 0.7-4.4 s on Tiny-ImageNet, by batch
  size), VGG-11 to 22-69 hours, Shakespeare to about 460 hours (56 clients x about 1,500 LSTM
  steps a round): GPU work. GC-Fed's CNN set-ups take 1.5-2.5 hours, FEMNIST 15, CelebA 6,
  EMNIST's MLP minutes.
* **Evaluation schedule.** Every set-up keeps `eval-every` 1, the papers' schedule: FedACG's
  and FedAGM's tables read the EMA of every round's test accuracy and the first round it reaches
  a target, GC-Fed's the accuracy at the end and its EMA; the projection counts the full test set
  every round (Tiny-ImageNet: about 500 s of a round on this CPU, Shakespeare's 845 K held-out
  lines about 330 s). `eval-every 10` divides that part by ten and leaves rounds-to-target only
  to the nearest 10 rounds.
* **Stateful baselines.** All six (SCAFFOLD, FedDyn, FedDC, FedVARP, FedCM, MOON) ran at
  500 clients x ResNet-18 (`fedacg-t1b-cifar10`, the rows below the set-ups), peaks 4.3-5.6
  GB; SCAFFOLD, FedDyn and FedVARP also at the largest set-up that reports them (GC-Fed's
  1,000-client Tiny-ImageNet, `--stateful` alone picks it), peaks 6.5-6.8 GB.
* **Per-client state** (SCAFFOLD's c_i, FedDyn's g_i, FedDC's h_i) is written on the node's
  disk, one model a client (`client_app/client_state_store.py`): at 500 clients x ResNet-18 up to
  22 GB of disk over a full run, never host memory. FedVARP's server table (500 x 45 MB =
  22 GB) is a sparse memory-mapped file; its checkpoint used to copy the rows into memory
  (44 GB with torch.save's buffer: the run would have died at a checkpoint once about 200
  clients had been seen) and now streams them to a file beside the runs
  ([baselines](baselines.md#fedvarp)): up to 3 x 22 GB of disk.
* **The simulation's floor, and W1's memory goal.** Flower's Ray backend already starts Ray
  without the dashboard UI (`include_dashboard` false); Ray 2.55 still starts its API server
  (minimal), the dashboard agent, the runtime-env agent, the autoscaler monitor and the log
  monitor, and `ray.init` has no switch for them. `python -m benchmarks.sim_floor` runs a floor
  app through `flwr run` as the app runs: a ServerApp and a ClientApp that import PyTorch and
  pass a small CNN to 5 nodes and back, nothing else. Its peak is 1,632 MB resident (1,117 MB
  proportional: a page shared by k processes counted 1/k): the simulation process 425, the
  ClientApp's Ray actor 398, the SuperLink and SuperExec 265, Ray's own processes 545. On W1
  (`python -m benchmarks.sim_vs_loop --blocks 1`, same machine, busy) the app peaked at 2,403 MB
  (1,736 proportional) against the plain loop's 472: the actor 812, the simulation process 776,
  the rest as in the floor. The goal, 2 x the plain loop + the models = 960 MB, is below the
  floor itself, so no app meets it through Flower 1.41's Ray simulation; the app's own part,
  above the floor, is 771 MB = 1.6 x the plain loop. About 200 MB of that in each of the two
  processes was imports; each now imports what it uses (no flwr-datasets, seaborn, scipy or
  pyplot; matplotlib only to draw), which took 110 MB off the ClientApp's actor and 70 MB off
  the simulation process on W1 and left `datasets` with pandas and pyarrow
  ([performance](performance.md#the-simulations-memory)). The same app in the in-process
  runtime (no SuperLink, no Ray: `experiments.sweep --in-process`, `inprocess.run_in_process`)
  peaked at 852 MB, within the goal; `sim_vs_loop` prints all of these.
"""


def setups_page() -> str:
    """docs/setups.md: the set-ups and their fidelity to the authors' codes."""
    from benchmarks.rehearse import markdown_section

    from .fidelity import fidelity_markdown

    return (SETUPS_INTRO + "\n" + setups() + "\n\n" + REHEARSAL_INTRO + "\n"
            + markdown_section() + "\n\n" + REHEARSAL_NOTES + "\n" + fidelity_markdown()
            + "\n")


def configuration_page() -> str:
    """docs/configuration.md."""
    return markdown()


def toml() -> str:
    """The [tool.flwr.app.config] section: every key with its default, topic by topic as in
    docs/configuration.md."""
    lines = ["[tool.flwr.app.config]"]
    for title, _, names in grouped(KEYS):
        lines.append(f"# {title}")
        for name in names:
            default = KEYS_BY_NAME[name].default
            if isinstance(default, bool):
                value = str(default).lower()
            elif isinstance(default, str):
                value = f'"{default}"'
            else:
                value = repr(default)
            lines.append(f"{name} = {value}")
    return "\n".join(lines)
