"""Print the README's key table (`--markdown`), its method table (`--methods`) or the pyproject
section (`--toml`), all from the one definition in `schema.py` and `presets.py`."""

import argparse

from .presets import FLOWER_BASELINES, PRESETS
from .schema import KEYS


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--methods", action="store_true")
    parser.add_argument("--toml", action="store_true")
    args = parser.parse_args()
    print(toml() if args.toml else methods() if args.methods else markdown())
