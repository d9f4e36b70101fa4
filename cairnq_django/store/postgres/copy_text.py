"""Values spelled as fields of PostgreSQL's COPY text format.

A row is its fields joined by tabs and ended by a newline; ``\\N`` is NULL.
Inside a field, a backslash starts an escape, so the server would read a
literal backslash, tab, newline or carriage return as something else: those
four are written as ``\\\\``, ``\\t``, ``\\n`` and ``\\r``, and every other
character stands for itself. (NUL cannot be sent at all; every text the
store writes was refused earlier if it held one.)
"""

from __future__ import annotations

NULL = "\\N"

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def text(value: str | None) -> str:
    """``value`` as a COPY text field: NULL for None, the four special characters escaped."""
    if value is None:
        return NULL
    # Tab, newline and carriage return are not printable, so a printable
    # value without a backslash (nearly every value) needs no escaping.
    if "\\" in value or not value.isprintable():
        return value.translate(_ESCAPES)
    return value
