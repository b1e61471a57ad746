"""Errors that the CLI reports as one line on stderr (and a non-zero exit), never as a traceback."""


class UserError(Exception):
    """Bad input: a missing file, an unsupported architecture, a malformed config. The message names what
    and where in one line."""


class ConfigError(UserError):
    """A workflow config that the schema accepts but whose keys disagree with each other."""
