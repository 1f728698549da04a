"""The one exception type a user can cause: bad input, named with its file and field."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable


class CapsimError(Exception):
    """A problem with the user's input. The CLI prints the message, without a traceback, and exits 2."""


def did_you_mean(name: str, choices: Iterable[str], limit: int = 3) -> str:
    """' Did you mean: a, b?' for the closest choices, or '' when nothing is close."""
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=limit, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxset = 2, 4, 4, 4, 4
_SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 48, 40, 48


def quote(value: object, limit: int = 60) -> str:
    """repr(value) cut to about `limit` characters: how a message quotes what the user gave, so
    that a huge or deeply nested value cannot turn one error into megabytes of text."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy scalar: as the number it is
        value = value.item()
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def short_path(path: object, limit: int = 160) -> str:
    """A path as messages name it: whole, unless it is absurdly long (then its start and end)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 2:]}"
