"""Pin that docs/tutorial.md runs as written in a fresh ``startproject``.

The steps come from the page itself, so the page and this test cannot
drift: the ``$ django-admin`` / ``$ python manage.py`` lines of its console
blocks are run in order (``pip``, the worker and ``runserver`` excepted),
every code block whose first line is ``# <path>`` is written to that path
(``(add at the end)`` appends), and the shell session of section 4 runs
against a real worker. Then the sign-up view's task is run by a
``--burst`` worker and the page's own pytest-django test passes.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests._fresh_project import FreshProject, scratch_database

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
FILE_MARKER = re.compile(r"^# (\S+)( \(add at the end\))?$")


def blocks() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(TUTORIAL.read_text())]


def files() -> list[tuple[str, bool, str]]:
    """(path, append, text) of every code block that names its file."""
    found = []
    for _, body in blocks():
        first, _, rest = body.partition("\n")
        marker = FILE_MARKER.match(first)
        if marker:
            found.append((marker.group(1), bool(marker.group(2)), rest))
    return found


def commands() -> list[list[str]]:
    """The setup commands of the console blocks, in page order."""
    found = []
    for lang, body in blocks():
        if lang != "console":
            continue
        for line in body.splitlines():
            if not line.startswith("$ "):
                continue
            words = shlex.split(line[2:])
            if words[:1] == ["django-admin"] or words[:2] == ["python", "manage.py"]:
                if words[-1:] != ["runserver"] and "cairnq_worker" not in words:
                    found.append(words)
    return found


def shell_session() -> list[tuple[str, str | None]]:
    """(statement, expected repr or None) of the page's ``pycon`` block."""
    [body] = [body for lang, body in blocks() if lang == "pycon"]
    session: list[tuple[str, str | None]] = []
    for line in body.splitlines():
        if line.startswith(">>> "):
            session.append((line[4:], None))
        elif line.strip() and session:
            session[-1] = (session[-1][0], line)
    return session


def test_the_page_names_what_this_test_applies() -> None:
    paths = [path for path, _, _ in files()]
    assert paths == [
        "shop/settings.py", "accounts/tasks.py", "accounts/models.py", "accounts/views.py",
        "shop/urls.py", "pytest.ini", "accounts/test_sign_up.py",
    ]
    assert commands()[0][:2] == ["django-admin", "startproject"]
    assert any(expected for _, expected in shell_session())


def test_tutorial_runs_as_written(tmp_path: Path) -> None:
    root = tmp_path / "tutorial"
    root.mkdir()
    with scratch_database() as database:
        env = FreshProject(root, None).env
        project: FreshProject | None = None
        for words in commands():
            if words[0] == "django-admin":
                subprocess.run([sys.executable, "-m", "django", *words[1:]], cwd=root, env=env, check=True, timeout=60)
                project = FreshProject(root, database, name=words[2])
                continue
            assert project is not None
            if words[2] == "startapp":
                project.ok(*words[2:])
                # The page's files, once the app they belong to exists.
                for path, append, text in files():
                    if append:
                        with (root / path).open("a") as out:
                            out.write("\n" + text)
                    else:
                        project.write(path, text)
                continue
            done = project.ok(*words[2:])
            if words[2] == "check":
                assert "no issues" in done.stdout
        assert project is not None

        # Section 3: the sign-up view enqueues; a --burst worker sends the mail.
        posted = project.shell(
            "from django.test import Client\n"
            "reply = Client(HTTP_HOST='localhost').post('/sign-up/', {'email': 'grace@example.com'})\n"
            "print('STATUS', reply.status_code, reply.content.decode())\n"
        )
        assert 'STATUS 200 {"ok": true}' in posted.stdout, posted.stdout + posted.stderr
        worker = project.ok("cairnq_worker", "--burst")
        # The console e-mail backend printed the welcome on the worker's stdout.
        assert "Subject: Welcome!" in worker.stdout and "To: grace@example.com" in worker.stdout, worker.stdout
        outcome = project.shell(
            "import cairnq_django as cairnq\n"
            "[task] = cairnq.list(name='accounts.welcome')\n"
            "print('OUTCOME', task.status, task.result, cairnq.get_by_key('welcome:1').id == task.id)\n"
        )
        assert "OUTCOME succeeded {'sent_to': 'grace@example.com'} True" in outcome.stdout, outcome.stdout + outcome.stderr

        # Section 4: the shell session, against a running worker.
        running = subprocess.Popen(
            [sys.executable, "manage.py", "cairnq_worker", "--concurrency", "4"],
            cwd=root, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            script = "\n".join(
                f"print('REPR', repr({statement}))" if expected else statement
                for statement, expected in shell_session()
            )
            session = project.shell(script, timeout=90)
            expected = [f"REPR {value}" for _, value in shell_session() if value]
            assert [line for line in session.stdout.splitlines() if line.startswith("REPR ")] == expected, (
                session.stdout + session.stderr
            )
            deadline = time.monotonic() + 60
            while True:
                counted = project.shell(
                    "import cairnq_django as cairnq\n"
                    "print('DONE', cairnq.stats()['default']['succeeded'])\n"
                )
                done = re.search(r"DONE (\d+)", counted.stdout)
                if done and int(done.group(1)) == 1 + 1 + 100:
                    break
                assert time.monotonic() < deadline, counted.stdout + counted.stderr
                time.sleep(0.5)
        finally:
            os.killpg(running.pid, signal.SIGTERM)
            running.communicate(timeout=30)
        assert running.returncode == 0

        # Section 6: the page's own test, with pytest-django.
        tested = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
            cwd=root, env=project.env, capture_output=True, text=True, timeout=180,
        )
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "1 passed" in tested.stdout
