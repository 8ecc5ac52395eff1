"""`python -m run_config --markdown` prints the README's key table; `--toml` the pyproject section."""

import argparse

from .schema import KEYS


def markdown() -> str:
    rows = ["| key | default | allowed | what it does |", "| --- | --- | --- | --- |"]
    for k in KEYS:
        default = f"'{k.default}'" if isinstance(k.default, str) else str(k.default).lower() \
            if isinstance(k.default, bool) else f"{k.default}"
        rows.append(f"| `{k.name}` | {default} | {k.allowed()} | {k.help} |")
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
    parser.add_argument("--toml", action="store_true")
    args = parser.parse_args()
    print(toml() if args.toml else markdown())
