"""Know when a SQLite database's ``-wal`` file is written, without polling (Linux inotify).

Every commit in WAL mode appends frames to ``<database>-wal`` with ``write()``,
which the kernel reports to an inotify watch on the file's directory. The
directory is watched rather than the file: a checkpoint may truncate the file
and a new connection may create it, and neither must end the watch.

A write is only a hint. The commit it belongs to becomes visible to readers
a little later (after the WAL is flushed, at ``synchronous=FULL``, and once
the writer updates the shared WAL index), so the waiter still decides by the
connection's ``PRAGMA data_version``; see ``wakeup.CommitWaker``.

inotify is reached through ``ctypes`` (the standard library has no binding).
Where it is missing (not Linux, no ``inotify_init1``, a watch refused by the
kernel's limits) ``open`` returns None and the waiter polls instead.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import sys
from functools import lru_cache
from typing import Any

logger = logging.getLogger("cairnq_django.worker")

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000
_WATCHED = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
# struct inotify_event: int wd; uint32_t mask, cookie, len; char name[len].
_EVENT_HEAD = struct.Struct("iIII")


@lru_cache(maxsize=1)
def _libc() -> Any:
    """The C library, when it has inotify; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class WalWatch:
    """An inotify descriptor that turns readable when the ``-wal`` file may have changed."""

    def __init__(self, fd: int, wal_name: bytes) -> None:
        self.fd = fd
        self.wal_name = wal_name

    @classmethod
    def open(cls, database_path: str) -> WalWatch | None:
        """Watch ``database_path``'s WAL file, or return None where that is not possible."""
        libc = _libc()
        if libc is None or not database_path:
            return None
        directory, name = os.path.split(os.path.abspath(database_path))
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            logger.debug("inotify_init1 failed: %s; polling for commits", os.strerror(ctypes.get_errno()))
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), _WATCHED) < 0:
            logger.debug(
                "cannot watch %s: %s; polling for commits", directory, os.strerror(ctypes.get_errno())
            )
            os.close(fd)
            return None
        return cls(fd, os.fsencode(name) + b"-wal")

    def drain(self) -> bool:
        """Read every pending event; True if one was about the WAL file.

        An overflowed event queue counts as a WAL write too: the events it
        dropped may have been.
        """
        touched = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return touched
            offset = 0
            while offset + _EVENT_HEAD.size <= len(data):
                _, mask, _, length = _EVENT_HEAD.unpack_from(data, offset)
                start = offset + _EVENT_HEAD.size
                name = data[start : start + length].rstrip(b"\0")
                offset = start + length
                if mask & _IN_Q_OVERFLOW or name == self.wal_name:
                    touched = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
