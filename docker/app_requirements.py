"""Print the app's Python requirements (pyproject.toml [project].dependencies) for a SuperExec
image.

    python docker/app_requirements.py pyproject.toml > requirements.txt

Flower itself is left out: the base image (flwr/superexec:<version>) already has the flwr that
matches the SuperLink and SuperNodes, and the simulation extra (Ray) is not needed in deployment.
"""

from __future__ import annotations

import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: flwr depends on tomli
    import tomli as tomllib

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def app_requirements(pyproject_text: str) -> list[str]:
    deps = tomllib.loads(pyproject_text)["project"]["dependencies"]
    keep = []
    for dep in deps:
        match = NAME.match(dep)
        name = match.group(1).lower().replace("_", "-") if match else ""
        if name != "flwr":
            keep.append(dep)
    return keep


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"
    with open(path, encoding="utf-8") as f:
        print("\n".join(app_requirements(f.read())))
