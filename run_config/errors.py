"""The one error type of the run configuration (shared by validation and the set-up loader)."""


class ConfigError(ValueError):
    """A run-config value is unknown, of the wrong type or out of range."""
