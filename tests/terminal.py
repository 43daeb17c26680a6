"""Running a command under a pseudo-terminal, for the output memctl draws only on a terminal
(the search table, progress lines). Every read is bounded: a child that hangs is killed."""

from __future__ import annotations

import os
import re
import select
import signal
import time

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_terminal(command: list[str], env: dict[str, str], columns: int = 80, timeout: float = 120,
                raw: bool = False) -> tuple[int, str]:
    """Run under a pseudo-terminal of `columns` columns; (exit status, output without ANSI codes
    and carriage returns, or as it came with `raw`)."""
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr are the terminal
        os.execve(command[0], command, {**env, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    output = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode("utf-8", "replace")
    return os.waitstatus_to_exitcode(status), text if raw else ANSI.sub("", text).replace("\r", "")
