"""status: per layer counts, pending raw logs, last archive and dream runs, index freshness."""

from __future__ import annotations

import json
import os
import random
import time
from datetime import datetime

from memctl.l4 import loggen
from l4_helpers import make_folder


def status(run, root, env=None) -> dict:
    result = run("status", "--json", root=root, env=env)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_status_reports_layers_pending_runs_and_index(run, tmp_path):
    folder = make_folder(tmp_path)
    assert run("init", root=folder.root).returncode == 0
    folder.add_log("model_responses_1.txt", loggen.format_a(datetime(2026, 4, 5, 9, 0), 2, random.Random(1)))
    folder.add_log("model_responses_2.txt", loggen.format_b(datetime(2026, 4, 6, 9, 0), 2, random.Random(2)))
    live = folder.add_log("model_responses_3.txt", loggen.format_b(datetime(2026, 4, 7, 9, 0), 1, random.Random(3)), 0)
    (folder.root / "global_mem.txt").write_text("## [NAS]\nmount: vers=3.0\n\n## [PROXY]\nport: 7890\n")
    (folder.root / "deploy_sop.md").write_text("# Deploy\nblue/green\n")
    before = status(run, folder.root)
    assert before["pending_raw"] == 3 and before["pending_raw_bytes"] == sum(
        (folder.raw_dir / n).stat().st_size for n in folder.originals)
    assert before["last_archive"] == "" and before["last_dream"] == {}
    assert before["index"]["exists"] is False

    env = {"MEMCTL_NOW": "2026-04-08T12:00:00"}
    for name, stamp in (("model_responses_1.txt", "2026-04-05T10:00"), ("model_responses_2.txt", "2026-04-06T10:00"),
                        ("model_responses_3.txt", "2026-04-08T11:30")):  # the clock decides liveness
        seconds = datetime.fromisoformat(stamp).timestamp()
        os.utime(folder.raw_dir / name, (seconds, seconds))
    assert run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root, env=env).returncode == 0
    assert run("remember", "The NAS needs vers=3.0", "--type", "tool", "--topic", "nas", root=folder.root).returncode == 0
    assert run("dream", root=folder.root, env=env).returncode == 0
    assert run("search", "vers", root=folder.root).returncode == 0
    after = status(run, folder.root)
    layers = after["layers"]
    assert layers["L2"] == {"files": 1, "entries": 2, "bytes": (folder.root / "global_mem.txt").stat().st_size,
                            "unit": "sections", "bad_lines": 0}
    assert layers["L3"]["files"] == 1 and layers["L3"]["entries"] == 1
    assert layers["L4"]["entries"] == 2 and layers["L4"]["files"] == 3  # zip, manifest, history
    assert layers["L5"]["entries"] == 1 and layers["L1"]["files"] == 0
    assert after["pending_raw"] == 1 and after["pending_raw_bytes"] == live.stat().st_size
    assert after["last_archive"] == "2026-04-08T12:00:00"
    assert after["last_dream"]["at"] == "2026-04-08T12:00:00" and after["last_dream"]["run"].startswith("d-")
    assert after["index"]["exists"] and after["index"]["fresh"]
    later = time.time() + 5
    os.utime(folder.root / "global_mem.txt", (later, later))
    assert status(run, folder.root)["index"]["fresh"] is False
    plain = run("status", root=folder.root).stdout.decode()
    assert "L5\t1 files\t1 entries" in plain and "index\tstale" in plain and "last archive\t2026-04-08T12:00:00" in plain


def test_status_does_not_count_a_line_that_is_not_an_entry(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    for text in ("the proxy listens on port 7890", "backups run at night on the nas"):
        assert run("remember", "--type", "lesson", text, root=root).returncode == 0
    with open(root / "long_term.jsonl", "ab") as handle:
        handle.write(b'{"id": "half a line\n[1, 2]\n')
    layers = status(run, root)["layers"]
    assert (layers["L5"]["entries"], layers["L5"]["bad_lines"]) == (2, 2)
    assert (layers["L6"]["entries"], layers["L6"]["bad_lines"]) == (0, 0)
    plain = run("status", root=root).stdout.decode()
    assert "L5\t1 files\t2 entries" in plain and "2 lines not entries (`memctl verify` lists them)" in plain
    assert run("remember", "--type", "lesson", "the vpn needs mfa", root=root).returncode == 0
    assert status(run, root)["layers"]["L5"]["entries"] == 3  # once the lookups know the file, still counted
