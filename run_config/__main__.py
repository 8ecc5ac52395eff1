"""Print the README's key table (`--markdown`), its method table (`--methods`), its paper set-up
table (`--setups`) or the pyproject section (`--toml`), all from the one definition in
`schema.py`, `presets.py` and `setups/*.yaml`; `--command NAME` prints the command of a set-up."""

import argparse

from .presets import FLOWER_BASELINES, PRESETS
from .schema import KEYS, KEYS_BY_NAME
from .setups import load_setup, setup_command, setup_names


def markdown() -> str:
    rows = ["| key | default | allowed | what it does |", "| --- | --- | --- | --- |"]
    for k in KEYS:
        default = f"'{k.default}'" if isinstance(k.default, str) else str(k.default).lower() \
            if isinstance(k.default, bool) else f"{k.default}"
        rows.append(f"| `{k.name}` | {default} | {k.allowed()} | {k.help} |")
    return "\n".join(rows)


def methods() -> str:
    cols = list(next(iter(PRESETS.values())))
    rows = ["| method | " + " | ".join(f"`{c}`" for c in cols) + " | server update |",
            "| --- " * (len(cols) + 2) + "|"]
    for name, preset in PRESETS.items():
        cells = [str(v).lower() if isinstance(v, bool) else str(v) for v in preset.values()]
        server = "Flower's own" if name in FLOWER_BASELINES else "LookaheadFedAvg"
        rows.append(f"| `{name}` | " + " | ".join(cells) + f" | {server} |")
    return "\n".join(rows)


def setups() -> str:
    rows = ["| set-up | paper | dataset | model | split | clients (per round) | rounds | command |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in setup_names():
        s = load_setup(name)
        rc = s["run-config"]
        split = rc.get("partitioner", "dirichlet-balanced")
        alpha = {"dirichlet-balanced": "dirichlet-alpha", "lda": "lda-alpha"}.get(split)
        split += f" {rc.get(alpha, KEYS_BY_NAME[alpha].default)}" if alpha else ""
        frac = rc.get("fraction-train", KEYS_BY_NAME["fraction-train"].default)
        per_round = max(int(s["num-supernodes"] * frac + 1e-9), rc.get("min-train-nodes", 2))
        rows.append(
            f"| `{name}` | {s['paper']} | {rc.get('dataset', 'digits')} | {rc.get('model', 'cnn')} "
            f"| {split} | {s['num-supernodes']} ({per_round}) | {rc.get('num-server-rounds', 30)} "
            f"| `{setup_command(name)}` |")
    return "\n".join(rows)


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


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["check"]:  # python -m run_config check --run-config "..."
        from .check import main as check_main

        sys.exit(check_main(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--methods", action="store_true")
    parser.add_argument("--toml", action="store_true")
    parser.add_argument("--setups", action="store_true")
    parser.add_argument("--command", metavar="SETUP", help="print the command that runs SETUP")
    args = parser.parse_args()
    if args.command:
        print(setup_command(args.command))
    else:
        print(toml() if args.toml else methods() if args.methods else setups() if args.setups
              else markdown())
