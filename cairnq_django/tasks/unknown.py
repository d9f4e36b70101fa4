"""What ``submit`` does with a task name that no installed app declares.

A Django-only project runs every task on its own workers, so a name no
``@task`` declares is almost always a typo: the row would sit ``queued``
until someone noticed. ``CAIRNQ["UNKNOWN_TASKS"]`` decides:

* ``"raise"`` (the default): ``UnknownTask``, nothing written;
* ``"warn"``: an ``UnknownTaskWarning``, and the task is enqueued;
* ``"allow"``: enqueued silently (a queue shared with other SDKs' workers).

Names that other SDKs' workers run are listed in ``CAIRNQ["FOREIGN_TASKS"]``
(exact names or shell-style patterns such as ``"reports.*"``) and always pass.
The registry is filled when the app registry is ready (every app's
``tasks.py``), so the judgement holds in web processes as in workers.
"""

from __future__ import annotations

import difflib
import fnmatch
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..conf import get_config
from ..exceptions import UnknownTask, UnknownTaskWarning
from .registry import get_task, registered

if TYPE_CHECKING:
    from ..store.base import SubmitSpec

MODES = ("raise", "warn", "allow")


def _foreign(name: str, patterns: Any) -> bool:
    if not isinstance(patterns, (list, tuple)):
        return False  # a malformed setting is check cairnq.E015's to report
    return any(
        isinstance(pattern, str) and (name == pattern or fnmatch.fnmatchcase(name, pattern))
        for pattern in patterns
    )


def _message(name: str) -> str:
    close = difflib.get_close_matches(name, list(registered()), n=1)
    suggestion = f' Did you mean "{close[0]}"?' if close else ""
    return (
        f"no installed app declares a task named {name!r}.{suggestion} Declare it with "
        "@cairnq.task in an app's tasks.py, or, if another SDK's worker runs it, list it "
        'in CAIRNQ["FOREIGN_TASKS"] (or set CAIRNQ["UNKNOWN_TASKS"] to "warn" or "allow")'
    )


def judge(name: str, config: dict[str, Any] | None = None) -> None:
    """Raise ``UnknownTask`` or warn for an undeclared ``name``, as ``UNKNOWN_TASKS`` says."""
    if get_task(name) is not None:
        return
    config = config if config is not None else get_config()
    mode = config["UNKNOWN_TASKS"]
    if mode == "allow" or _foreign(name, config["FOREIGN_TASKS"]):
        return
    if mode == "warn":
        # stacklevel: past judge, the api function and its schema guard, to the caller.
        warnings.warn(_message(name), UnknownTaskWarning, stacklevel=4)
        return
    # "raise", and any value check cairnq.E015 reports: refuse rather than guess.
    raise UnknownTask(name, _message(name))


def judged(specs: Iterable[SubmitSpec]) -> Iterator[SubmitSpec]:
    """``specs``, each name judged once per call before it is written."""
    config = get_config()
    if config["UNKNOWN_TASKS"] == "allow":
        yield from specs
        return
    seen: set[str] = set()
    for spec in specs:
        name = spec.name
        if name not in seen:
            judge(name, config)
            seen.add(name)
        yield spec

