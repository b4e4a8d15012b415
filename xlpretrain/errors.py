"""Errors every layer may raise, defined below all of them."""


class ConfigError(ValueError):
    """A configuration value is unknown, mistyped or out of range."""
