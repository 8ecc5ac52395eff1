"""`python -m run_config` prints what is generated from the one definition in `schema.py`,
`presets.py`, `topics.py` and `setups/*.yaml`:

    python -m run_config --markdown     docs/configuration.md (every key, grouped by topic)
    python -m run_config --methods      the README's methods table
    python -m run_config --setups       the paper set-ups table (in docs/setups.md)
    python -m run_config --setups-page  docs/setups.md
    python -m run_config --toml         the [tool.flwr.app.config] section of pyproject.toml
    python -m run_config --command NAME the command that runs the paper set-up NAME

`python -m run_config SUBCOMMAND ...` runs another module's `main(argv)` (see SUBCOMMANDS).
"""

import argparse
import importlib
import sys

from .presets import PRESETS
from .schema import KEYS, KEYS_BY_NAME, Key
from .setups import load_setup, setup_command, setup_names
from .topics import grouped

# `python -m run_config NAME ARGS...` -> main(ARGS) of the module named here; add a line per
# subcommand, e.g. "check": "run_config.check".
SUBCOMMANDS: dict[str, str] = {"check": "run_config.check"}


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

Every run-config key, with its default, its allowed values and what it does. The keys are defined
once, in `run_config/schema.py` (type, default, range, help); the same definition validates a run,
makes the `[tool.flwr.app.config]` section of `pyproject.toml` (`python -m run_config --toml`) and
this page (`python -m run_config --markdown`, grouped by `run_config/topics.py`; a test keeps the
page equal to that output). A wrong key or value stops the run before anything starts, with an
error naming the key and what is allowed.

Set keys with `flwr run . --run-config "KEY=VALUE KEY=VALUE"`: strings in single quotes
(`method='gcfed'`), numbers and `true`/`false` bare. The keys whose default is `'preset'` take the
value of the chosen `method` ([presets](algorithms.md#presets)); giving one a value overrides the
method. A paper set-up (`setup`) fills in every key still at its default ([set-ups](setups.md)).
The federation itself (number of clients, resources) is Flower's `--federation-config`, not a
run-config key ([performance](performance.md)).
"""


def markdown() -> str:
    """docs/configuration.md: one table per topic."""
    topics = grouped([k.name for k in KEYS])
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

    rows = ["| method | server rule | client parts | sets | paper |", "| --- " * 5 + "|"]
    for name, preset in PRESETS.items():
        method = registry.METHODS[name]
        sets = ", ".join(f"`{k}` {str(v).lower() if isinstance(v, bool) else v}"
                         for k, v in preset.items()
                         if k in registry.BASE_PRESET and v != registry.BASE_PRESET[k])
        rows.append(f"| `{name}` | {method.server_rule} | "
                    f"{', '.join(method.client_parts) or '-'} | {sets or '-'} | {method.paper} |")
    return "\n".join(rows)


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
its default value keeps the set-up's value. `method` defaults to `auto` (the set-up's method;
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

This page is generated: `python -m run_config --setups-page > docs/setups.md`.
"""


def setups_page() -> str:
    """docs/setups.md: the set-ups and their fidelity to the authors' codes."""
    from .fidelity import fidelity_markdown

    return SETUPS_INTRO + "\n" + setups() + "\n\n" + fidelity_markdown() + "\n"


def configuration_page() -> str:
    """docs/configuration.md."""
    return markdown()


def toml() -> str:
    lines = ["[tool.flwr.app.config]"]
    group = None
    for k in KEYS:
        if k.group != group:
            group = k.group
            lines.append(f"# {group}")
        if isinstance(k.default, bool):
            value = str(k.default).lower()
        elif isinstance(k.default, str):
            value = f'"{k.default}"'
        else:
            value = repr(k.default)
        lines.append(f"{k.name} = {value}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="python -m run_config", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="docs/configuration.md (default)")
    what.add_argument("--methods", action="store_true", help="the methods table")
    what.add_argument("--toml", action="store_true", help="the pyproject section")
    what.add_argument("--setups", action="store_true", help="the paper set-ups table")
    what.add_argument("--setups-page", action="store_true", help="docs/setups.md")
    what.add_argument("--command", metavar="SETUP", help="print the command that runs SETUP")
    args = parser.parse_args(argv)
    if args.command:
        print(setup_command(args.command))
    elif args.toml:
        print(toml())
    elif args.methods:
        print(methods())
    elif args.setups:
        print(setups())
    elif args.setups_page:
        print(setups_page(), end="")
    else:
        print(markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
