"""How the `workbench` command ends when it does not finish: its exit statuses and lines.

A run stopped by Ctrl-C exits with status 130 and SIGTERM (what `timeout`, SLURM and torchrun
send) with 143, printing one line that says how to resume: `sigterm_interrupts` turns SIGTERM
into `Terminated`, a `KeyboardInterrupt`, so that it unwinds as Ctrl-C does, every `with`
releasing what it holds (the results folder's lock) and no file left half written. A write
that fails for lack of space, on a read-only file system or for lack of permission
(`WRITE_ERRORS`) is one line with the advice that fits (`write_error_line`), exit status 2, as
every input error. `workbench.cli.parser.main` applies them.
"""

from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM, what `timeout` and SLURM send
# a write that failed for lack of space, on a read-only file system or for lack of
# permission: one line with the advice that fits, not a traceback
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
READ_ONLY = (errno.EROFS,)
NO_PERMISSION = (errno.EACCES, errno.EPERM)
WRITE_ERRORS = (*NO_SPACE, *READ_ONLY, *NO_PERMISSION)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that it unwinds as Ctrl-C does: every `with`
    releases what it holds (the results folder's lock) and no file is left half written."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises `Terminated` while inside (in the main thread only, where Python
    delivers signals); a second SIGTERM while the first unwinds ends the process at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated()

    before = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def write_error_line(error: OSError, out: str | None) -> str:
    """The one line for a write that failed (`WRITE_ERRORS`), with the advice that fits the
    fault: free space, a writable place for a read-only file system, the permissions. Every
    file is written to a temporary name and renamed (`workbench.results.store`), and
    `config.json` records a table only once it is complete, so what was saved before is
    intact and a rerun resumes from it."""
    where = f" writing {error.filename}" if error.filename else ""
    code = errno.errorcode.get(error.errno, error.errno)
    what = f"{error.strerror or 'cannot write'}{where} ({code}); the files saved before are intact"
    elsewhere = "copy the folder to a writable place" + (", or give another --out" if out
                                                         else "")
    if error.errno in READ_ONLY:
        return f"{what}: the file system is read-only; {elsewhere}"
    if error.errno in NO_PERMISSION:
        return f"{what}: permission denied; make the folder writable for this user, or {elsewhere}"
    resume = f"; rerun the same command to resume from {out}" if out else ""
    return f"{what}: free space{resume}"
