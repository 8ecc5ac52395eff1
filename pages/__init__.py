"""The documentation's generated parts: the pages made from the code's one definitions
(`tables`: docs/configuration.md, docs/methods.md, docs/setups.md with its fidelity tables
(`fidelity`), the pyproject section; `generated`: the one writer of them) and the measured
examples (`examples`).

    python -m pages                 write every generated file (see `python -m pages --help`)
    python -m pages --check         exit 1 naming each generated file that is out of date
    python -m pages.examples        the generated files and the README's measured examples

A driver above the apps: nothing of the app imports it."""
