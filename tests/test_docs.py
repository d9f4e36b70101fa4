"""Pin that every setting and every worker flag is documented: a key added to
``conf.DEFAULTS`` or a flag added to ``cairnq_worker`` without docs fails here."""

from __future__ import annotations

import re
from pathlib import Path

from cairnq_django.conf import DEFAULTS
from cairnq_django.management.commands import cairnq_worker

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.M))
    assert documented == set(DEFAULTS)


def test_every_worker_flag_is_documented() -> None:
    parser = cairnq_worker.Command().create_parser("manage.py", "cairnq_worker")
    base = {"--version", "--verbosity", "--settings", "--pythonpath", "--traceback",
            "--no-color", "--force-color", "--skip-checks", "--help"}
    flags = {opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")}
    text = (DOCS / "worker.md").read_text()
    missing = sorted(flag for flag in flags - base if f"`{flag}" not in text)
    assert not missing, f"flags not in docs/worker.md: {missing}"
