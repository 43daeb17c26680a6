"""The fork server the fault matrices use (tests/forkserver.py) answers as the installed
`memctl` does: the same exit codes (a SIGKILL included), output bytes, stdin, environment and
working folder, and no state carried from one child to the next."""

from __future__ import annotations

import json

NOW = {"MEMCTL_NOW": "2026-06-01T04:00:00"}


def _same_story(runner, root, cwd) -> list[tuple[int, bytes, bytes]]:
    """What a short session exits with and prints."""
    torn, full = ({**NOW, "MEMCTL_FAULT_WRITE": f"1:{kind}"} for kind in ("torn", "enospc"))
    done = [runner("init", "--json", root=root),
            runner("remember", "the staging host is bk-07", "-t", "lesson", root=root, env=NOW),
            runner("remember", "-", "-t", "event", root=root, env=NOW, input="备份在周五 from stdin".encode()),
            runner("remember", "the wiki moved", "-t", "event", root=root, env=torn),
            runner("remember", "the wiki moved", "-t", "event", root=root, env=full),
            runner("verify", root=root),
            runner("verify", "--repair", root=root),
            runner("search", "staging", "--json", root=root),
            runner("status", "--json", cwd=cwd, env={"MEMCTL_HOME": str(root)}),
            runner("no-such-command", root=root)]
    return [(d.returncode, d.stdout, d.stderr) for d in done]


def test_a_forked_command_answers_as_the_installed_memctl(run, forked, tmp_path):
    stories = []
    for name, runner in (("exec", run), ("forked", forked)):
        folder = tmp_path / name
        folder.mkdir()
        stories.append(_same_story(runner, folder / "memory", folder))
    real, fork = stories
    assert [code for code, _, _ in real] == [code for code, _, _ in fork]
    assert -9 in [code for code, _, _ in fork] and 2 in [code for code, _, _ in fork]
    for (_, out_real, err_real), (_, out_fork, err_fork) in zip(real, fork):
        assert _comparable(out_real, "exec") == _comparable(out_fork, "forked")
        assert _comparable(err_real, "exec") == _comparable(err_fork, "forked")


def _comparable(data: bytes, folder: str) -> bytes:
    """Output with what differs between any two runs blanked: the folder, ids, stamps, timings."""
    import re

    data = data.replace(f"/{folder}/".encode(), b"/")
    data = re.sub(rb"\bm[0-9a-f]{12}\b", b"<id>", data)
    data = re.sub(rb"\d{8}T\d{6}\.\d+", b"<stamp>", data)
    data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", b"<time>", data)
    data = re.sub(rb'"(took|elapsed|seconds|duration)[a-z_]*": [0-9.]+', rb'"\1": 0', data)
    return data


def test_each_forked_child_starts_afresh(forked, tmp_path):
    root = tmp_path / "memory"
    assert forked("init", root=root).returncode == 0
    # the write counter of MEMCTL_FAULT_WRITE starts at zero in every child: write 1 is cut each time
    for _ in range(2):
        cut = forked("remember", "the wiki moved", "-t", "event", root=root, env={"MEMCTL_FAULT_WRITE": "1:enospc"})
        assert cut.returncode == 2 and b"nothing was written" in cut.stderr
    done = forked("remember", "the wiki moved", "-t", "event", root=root, env=NOW)
    assert done.returncode == 0
    entries = [json.loads(x) for x in (root / "long_term.jsonl").read_text().splitlines() if x.strip()]
    assert [e["text"] for e in entries] == ["the wiki moved"]
    assert entries[0]["created"].startswith("2026-06-01T04:00")  # MEMCTL_NOW of this child, not of another
