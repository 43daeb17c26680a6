"""Exit codes and the error types a user can act on.

Every module raises one of these; only the command line turns them into an exit status and
a one-line message (design.md §11, conventions.md §0).
"""

EXIT_OK = 0
EXIT_NO_MATCH = 1  # search found nothing, like grep
EXIT_ERROR = 2
EXIT_PARTIAL = 3  # some items failed, the rest were done
EXIT_BUSY = 75  # EX_TEMPFAIL: another memctl holds the lock


class MemctlError(Exception):
    """An error with a message that says what to do; exits 2 unless a subclass says otherwise."""

    exit_code = EXIT_ERROR


class UsageError(MemctlError):
    """The arguments or configuration are wrong."""


class ConfigError(MemctlError):
    """memctl.toml cannot be read or has a bad value."""


class LockBusy(MemctlError):
    """Another memctl process is writing to the same memory root."""

    exit_code = EXIT_BUSY


MAX_WAIT = 86_400.0  # seconds a --wait may ask for (core.fsutil.lock_wait): a day, not forever


class NotFound(MemctlError):
    """A reference (session name, entry id, file) does not exist."""


class IntegrityError(MemctlError):
    """Something read back is not what was written (zip CRC, sha256, manifest)."""


class UnsafePath(MemctlError):
    """A name would escape its folder, or a path is a symlink where a file was expected."""


class WriteFailed(MemctlError):
    """The disk refused a write (full, quota, I/O error); the file was put back as it was."""


class NotAMemory(MemctlError):
    """The root names no memory folder (no memctl.toml, no GenericAgent layout)."""


class ReadOnly(MemctlError):
    """A writing command was pointed at a memory this process may not write."""
