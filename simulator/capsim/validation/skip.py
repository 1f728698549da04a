"""The one exception of the validation mapping."""


class Skip(Exception):
    """The simulator cannot represent this point; the message says why."""
