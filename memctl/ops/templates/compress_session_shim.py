"""GenericAgent's L4 archiver, handed over to memctl by `memctl init`.

GenericAgent's scheduler (reflect/scheduler.py) imports this file every 12 hours and calls
batch_process(raw_dir, dry_run=False). Instead of compressing, appending to the monthly zips
and deleting raw logs itself, it now runs `memctl archive` on the same folder, which deletes
a raw log only after its session is verified in a zip, and returns a report shaped like
GenericAgent's own. This file deletes and rewrites nothing: when memctl cannot be run, or
fails, nothing is archived or deleted and the report counts one error.

GenericAgent's original is kept beside it as compress_session.genericagent.py (its
extract_history, compress_session and format_history_block are still importable from here);
`memctl init --undo-genericagent` puts it back.
"""
# memctl-genericagent-shim v1
import importlib.util
import json
import logging
import os
import subprocess
import sys

L4_DIR = os.path.dirname(os.path.abspath(__file__))
MEMORY_ROOT = os.path.dirname(L4_DIR)
ORIGINAL = os.path.join(L4_DIR, "compress_session.genericagent.py")
MEMCTL = __MEMCTL_COMMAND__  # the memctl that ran `memctl init`
TIMEOUT_SECONDS = 6 * 3600


def batch_process(src, l4_dir=None, dry_run=True):
    """Archive the raw logs in folder `src` with memctl (dry_run=True only reports)."""
    if isinstance(src, (list, tuple)):
        return _failed("memctl archives a folder of raw logs; pass the folder, not a list of files")
    if not os.access(MEMCTL[0], os.X_OK):
        return _failed(f"the Python that ran `memctl init` ({MEMCTL[0]}) is gone (a removed venv?); "
                       f"run `memctl init` in {os.path.dirname(MEMORY_ROOT)} again to repair this file")
    command = MEMCTL + ["--root", MEMORY_ROOT, "archive", "--json", os.path.abspath(src)]
    if dry_run:
        command.append("--dry-run")
    try:
        done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return _failed(f"memctl could not be run ({exc})")
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        lines = done.stderr.strip().splitlines() or ["no output"]
        return _failed(f"memctl archive exited {done.returncode}: {lines[-1]}")
    report = {"processed": summary["processed"], "skipped": sum(summary["skipped"].values()),
              "errors": len(summary["errors"]), "new_sessions": summary["new_sessions"],
              "deleted_raw": summary["deleted_raw"], "by": "memctl", "exit": done.returncode}
    if dry_run:
        report["sessions"] = [f["name"] for f in summary["files"] if f["action"] == "archive"]
    elif report["new_sessions"]:
        report["index"] = _refresh_index()
    print(f"memctl archive: {report}")
    return report


def _refresh_index():
    """Index the new sessions now, so the recall plugin's next compose stays within its limit."""
    try:
        done = subprocess.run(MEMCTL + ["--root", MEMORY_ROOT, "index", "refresh"], capture_output=True,
                              timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"not refreshed ({exc})"
    return "refreshed" if done.returncode == 0 else f"not refreshed (exit {done.returncode})"


def _failed(reason):
    """The report GenericAgent's scheduler prints, one line on stderr, and one in the
    scheduler's own log (sche_tasks/scheduler.log) where it keeps its L4 failures."""
    sys.stderr.write(f"[memctl shim] nothing archived or deleted: {reason}\n")
    scheduler_log = logging.getLogger("scheduler")
    if scheduler_log.handlers:
        scheduler_log.error(f"L4 archive failed: memctl shim: nothing archived or deleted: {reason}")
    return {"processed": 0, "skipped": 0, "errors": 1, "new_sessions": 0, "deleted_raw": 0,
            "by": "memctl", "error": reason}


def _original():
    if not os.path.isfile(ORIGINAL):
        return None
    spec = importlib.util.spec_from_file_location("compress_session_genericagent", ORIGINAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def __getattr__(name):
    """GenericAgent's read-only helpers (extract_history, …) from the original, on first use."""
    if name.startswith("__") or name == "batch_process":
        raise AttributeError(name)
    module = _original()
    if module is None or not hasattr(module, name):
        raise AttributeError(name)
    return getattr(module, name)
