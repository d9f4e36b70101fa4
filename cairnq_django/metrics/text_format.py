"""Prometheus text exposition format (version 0.0.4), for the few gauge families the view exports.

Written by hand rather than through ``prometheus_client``: the web process
then needs no extra installed, and a gauge family is three lines of rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# One sample: its labels and its value.
Sample = tuple[Mapping[str, str], float]


def label_value(text: str) -> str:
    """Escape a label value: backslash, double quote and line feed are the format's three escapes."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    # Whole numbers as integers ("3", not "3.0"); the format accepts both.
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def gauge(name: str, help_text: str, samples: Iterable[Sample]) -> str:
    """One gauge family: its HELP and TYPE lines, then a line per sample."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        pairs = ",".join(f'{key}="{label_value(text)}"' for key, text in labels.items())
        lines.append(f"{name}{{{pairs}}} {number(value)}" if pairs else f"{name} {number(value)}")
    return "\n".join(lines) + "\n"
