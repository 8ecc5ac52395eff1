"""The documentation's generated parts: the pages made from the code's one definitions
(`tables`: docs/configuration.md, docs/setups.md with its fidelity tables (`fidelity`), the
README's methods table, the pyproject section) and the measured examples (`examples`).

    python -m pages --markdown > docs/configuration.md   (see `python -m pages --help`)
    python -m pages.examples                             every generated part in one step

A driver above the apps: nothing of the app imports it."""
