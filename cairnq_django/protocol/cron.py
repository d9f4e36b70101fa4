"""Parse five-field cron expressions and find their ticks (UTC, minute resolution).

Fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
``jan``-``dec``), day of week (0-7, 0 and 7 are Sunday, or ``sun``-``sat``).
Each field is ``*`` or a comma list of ``N``, ``A-B``, ``*/S``, ``A-B/S`` and
``A/S`` (from A to the field's maximum). Macros: ``@yearly`` (``@annually``),
``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.

Day matching follows Vixie cron: when both day fields are restricted (neither
starts with ``*``) a day matches if EITHER matches; otherwise both must.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

__all__ = ["Cron", "CronError", "parse"]

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (label, lowest, highest, names where names[i] means lowest + i)
FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 7, WEEKDAYS),
)
# A matching day is found within 8 years or never (Feb 29 repeats within 8
# years, and "31 2" never matches at all).
_SEARCH_DAYS = 366 * 8 + 2
_MINUTE_MS = 60_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class CronError(ValueError):
    """A cron expression that cannot be parsed; the message names the field."""


def _number(text: str, label: str, names: tuple[str, ...], low: int) -> int:
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    if not text.isdigit():
        raise CronError(f"{label}: {text!r} is not a number" + (f" or one of {', '.join(names)}" if names else ""))
    return int(text)


def _field(text: str, label: str, low: int, high: int, names: tuple[str, ...]) -> frozenset[int]:
    if not text:
        raise CronError(f"{label}: empty field")
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{label}: empty list item in {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"{label}: step {step_text!r} must be a whole number >= 1")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _number(first, label, names, low), _number(last, label, names, low)
            if start > end:
                raise CronError(f"{label}: range {base!r} runs backwards")
        else:
            start = _number(base, label, names, low)
            # "A/S" means A, A+S, ... up to the maximum, as in Vixie cron.
            end = high if slash else start
        if start < low or end > high:
            raise CronError(f"{label}: {item!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed expression; ``previous(ms)`` and ``next(ms)`` give tick instants in epoch ms."""

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    day_restricted: bool
    weekday_restricted: bool

    def __str__(self) -> str:
        return self.expression

    def matches_day(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        # Python's weekday(): Monday = 0; cron's: Sunday = 0.
        in_weekdays = (day.weekday() + 1) % 7 in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def matches(self, when_ms: int) -> bool:
        """Return True if ``when_ms`` falls in a minute the expression names."""
        moment = _EPOCH + dt.timedelta(milliseconds=when_ms)
        return self.matches_day(moment.date()) and moment.hour in self.hours and moment.minute in self.minutes

    def previous(self, now_ms: int) -> int | None:
        """Return the latest tick at or before ``now_ms`` (None if there is none)."""
        moment = _EPOCH + dt.timedelta(milliseconds=now_ms - now_ms % _MINUTE_MS)
        day = moment.date()
        for offset in range(_SEARCH_DAYS):
            current = day - dt.timedelta(days=offset)
            if not self.matches_day(current):
                continue
            last_hour, last_minute = (moment.hour, moment.minute) if offset == 0 else (23, 59)
            for hour in reversed(self.hours):
                if hour > last_hour:
                    continue
                limit = last_minute if hour == last_hour else 59
                minutes = [minute for minute in self.minutes if minute <= limit]
                if minutes:
                    return _to_ms(current, hour, minutes[-1])
        return None

    def next(self, after_ms: int) -> int | None:
        """Return the earliest tick strictly after ``after_ms`` (None if there is none)."""
        start = after_ms - after_ms % _MINUTE_MS + _MINUTE_MS
        moment = _EPOCH + dt.timedelta(milliseconds=start)
        day = moment.date()
        for offset in range(_SEARCH_DAYS):
            current = day + dt.timedelta(days=offset)
            if not self.matches_day(current):
                continue
            first_hour, first_minute = (moment.hour, moment.minute) if offset == 0 else (0, 0)
            for hour in self.hours:
                if hour < first_hour:
                    continue
                floor = first_minute if hour == first_hour else 0
                minutes = [minute for minute in self.minutes if minute >= floor]
                if minutes:
                    return _to_ms(current, hour, minutes[0])
        return None


def _to_ms(day: dt.date, hour: int, minute: int) -> int:
    moment = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.timezone.utc)
    return int((moment - _EPOCH).total_seconds()) * 1000


def parse(expression: str) -> Cron:
    """Parse a cron expression or raise ``CronError`` naming the bad field."""
    if not isinstance(expression, str):
        raise CronError(f"a cron expression must be a string, got {expression!r}")
    text = MACROS.get(expression.strip().lower(), expression)
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expression!r} has {len(parts)} fields; cron needs 5 (minute hour day month weekday)")
    minute, hour, day, month, weekday = (
        _field(part, label, low, high, names) for part, (label, low, high, names) in zip(parts, FIELDS)
    )
    weekday = frozenset(value % 7 for value in weekday)  # 7 is Sunday too
    return Cron(
        expression=expression,
        minutes=tuple(sorted(minute)),
        hours=tuple(sorted(hour)),
        days=day,
        months=month,
        weekdays=weekday,
        day_restricted=not parts[2].startswith("*"),
        weekday_restricted=not parts[4].startswith("*"),
    )
