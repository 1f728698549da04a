"""The one exception type a user can cause: bad input, named with its file and field."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CapsimError(Exception):
    """A problem with the user's input. The CLI prints the message, without a traceback, and exits 2."""


def did_you_mean(name: str, choices: Iterable[str], limit: int = 3) -> str:
    """' Did you mean: a, b?' for the closest choices, or '' when nothing is close."""
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=limit, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""
