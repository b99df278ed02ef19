"""A results folder's lock, and the checks that a run may write there.

Two runs writing one folder would mix their tables, so a run holds an exclusive lock on the
folder's `.cel.lock` (`LOCK_FILE`, holding its process id) for as long as it writes:
a POSIX advisory lock (`flock`), which the OS releases when the process dies, so a killed
run never leaves a folder locked (on Windows, where there is none, the file's exclusive
creation). `ResultStore` takes it for the whole run (`acquire_lock`, `release_lock`); the
command line checks it (`check_unlocked`) and whether the folder can be written
(`check_writable`: a read-only file system and a missing permission each get their own line)
before it loads a model.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.errors import WorkbenchError

LOCK_FILE = ".cel.lock"

try:  # POSIX advisory locks; released by the OS when the process dies
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def acquire_lock(folder: Path) -> int:
    """Take `folder`'s lock (`LOCK_FILE`, created if need be, our process id written in it)
    and return its file descriptor; one `WorkbenchError` when another run holds it."""
    path = folder / LOCK_FILE
    if fcntl is None:  # pragma: no cover - Windows: exclusive creation only
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            raise WorkbenchError(busy_line(folder)) from None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            raise WorkbenchError(f"cannot write to results folder {str(folder)!r}: "
                                 f"{e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise WorkbenchError(busy_line(folder)) from None
        # another run may have unlinked the file between our open and our lock
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            return fd
        os.close(fd)


def release_lock(folder: Path, fd: int) -> None:
    """Give back the lock `acquire_lock` returned: delete `LOCK_FILE`, close `fd`."""
    try:
        (folder / LOCK_FILE).unlink(missing_ok=True)
    finally:
        os.close(fd)  # closing releases the flock


def busy_line(folder: str | Path) -> str:
    """The error for a folder whose lock another run holds, naming that run's process."""
    folder = Path(folder)
    try:
        pid = (folder / LOCK_FILE).read_text().strip()
    except OSError:
        pid = "?"
    return (f"results folder {str(folder)!r} is in use by another run (process {pid}); "
            "wait for it to finish or use another --out")


def check_unlocked(folder: str | Path) -> None:
    """Raise `WorkbenchError` when another run holds `folder`'s lock (a quick check before a
    run loads its model; `ResultStore` checks again when it takes the lock)."""
    path = Path(folder) / LOCK_FILE
    if fcntl is None or not path.exists():
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise WorkbenchError(busy_line(folder)) from None
    finally:
        os.close(fd)  # releases the probe's lock


def check_writable(folder: str | Path) -> None:
    """Raise `WorkbenchError` when a run could not write into `folder` (or, where it does not
    exist yet, create it): one line that says whether its file system is read-only or this
    user lacks the permission."""
    folder = Path(folder)
    target = folder
    while not target.exists() and target != target.parent:
        target = target.parent
    if os.access(target, os.W_OK | os.X_OK):
        return
    where = (f"results folder {str(folder)!r}" if target == folder else
             f"results folder {str(folder)!r} cannot be created: {str(target)!r}")
    read_only = hasattr(os, "statvfs") and bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    if read_only:
        raise WorkbenchError(f"{where} is on a read-only file system; give another --out (a "
                             "finished folder's report.md and view.html can be read where it is)")
    raise WorkbenchError(f"{where} is not writable by this user (permission denied); make it "
                         "writable or give another --out")
