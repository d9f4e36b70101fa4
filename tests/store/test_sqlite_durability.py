"""``relaxed_commits``: SQLite claims skip the commit flush only where that defers it.

Pins: a level other than NORMAL inside the block, or a level not restored
after it (FULL and EXTRA alike, and after an error); a connection the user set
to NORMAL or OFF raised, or one in a transaction or in rollback-journal mode
relaxed; a commit made relaxed that another connection cannot read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cairnq_django.store.sqlite.durability import relaxed_commits


def open_db(path: Path, journal_mode: str = "wal", synchronous: int = 2) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute(f"PRAGMA journal_mode={journal_mode}")
    connection.execute(f"PRAGMA synchronous={synchronous}")
    connection.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    return connection


def level(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA synchronous").fetchone()[0])


@pytest.mark.parametrize("start", [2, 3])
def test_full_and_extra_run_the_block_at_normal_then_come_back(tmp_path: Path, start: int) -> None:
    connection = open_db(tmp_path / "q.sqlite3", synchronous=start)
    with relaxed_commits(connection) as relaxed:
        assert relaxed and level(connection) == 1
        connection.execute("INSERT INTO t VALUES (1)")
    assert level(connection) == start
    reader = sqlite3.connect(tmp_path / "q.sqlite3")
    assert reader.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_the_level_comes_back_after_an_error(tmp_path: Path) -> None:
    connection = open_db(tmp_path / "q.sqlite3")
    with pytest.raises(sqlite3.OperationalError), relaxed_commits(connection):
        connection.execute("INSERT INTO missing VALUES (1)")
    assert level(connection) == 2


@pytest.mark.parametrize("start", [0, 1])
def test_a_connection_already_relaxed_is_left_as_it_is(tmp_path: Path, start: int) -> None:
    connection = open_db(tmp_path / "q.sqlite3", synchronous=start)
    with relaxed_commits(connection) as relaxed:
        assert not relaxed and level(connection) == start
    assert level(connection) == start


def test_rollback_journal_mode_is_left_synchronous(tmp_path: Path) -> None:
    connection = open_db(tmp_path / "q.sqlite3", journal_mode="delete")
    with relaxed_commits(connection) as relaxed:
        assert not relaxed and level(connection) == 2


def test_an_open_transaction_is_left_synchronous(tmp_path: Path) -> None:
    connection = open_db(tmp_path / "q.sqlite3")
    connection.execute("BEGIN")
    connection.execute("INSERT INTO t VALUES (1)")
    with relaxed_commits(connection) as relaxed:
        assert not relaxed and level(connection) == 2
    connection.execute("COMMIT")


def test_a_connection_closed_inside_the_block_is_not_an_error(tmp_path: Path) -> None:
    connection = open_db(tmp_path / "q.sqlite3")
    with relaxed_commits(connection):
        connection.close()
