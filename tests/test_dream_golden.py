"""The dream of a million entries in bounded memory (issue #31) must make the plan, and
write the files, that the dream before it made: this memory (tests/test_dream_streamed.py's,
where every rule has work — near-duplicates, stale entries, merge-key versions, links,
mergeable topics, a line that is not an entry, an id on two lines) was planned and dreamt by
main's code at `9cf1fd8`, and what it made is kept here: the whole plan in
`data/dream_plan_golden.json.gz`, the sha256 of L5, L6 and the dream log after the run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from memctl.longterm import dream
from memctl.longterm import dream_apply
from test_dream_streamed import NOW, _whole, memory  # noqa: F401  (the fixture)

GOLDEN = Path(__file__).parent / "data" / "dream_plan_golden.json.gz"
L5_AFTER = "5fe573965b7680a4517df5bcab06f5917ab3a259f9dd6f437d78e932e39445ad"
L6_AFTER = "a0dd3fb75ea27339a1b4633c99378a9ac9b20d896bf571dd2252462c9af77b1a"
# the log's records name their step: one digest per batch size
LOG_AFTER = {1000: "fceb8382750c8f15506c6f0f29c95d5c4996e30b562079b67f53b07ae4554e2e",
             60: "9d395603e0a370276fc3d7e7d4420abe980eecbdad4918ff55af2ed27622008f"}


def _as_json(value):
    return json.loads(json.dumps(value, ensure_ascii=False, sort_keys=True))


def test_the_plan_is_the_plan_main_made(memory, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMCTL_IDS", str(tmp_path / "ids"))
    plan = dream.plan_now(memory, NOW, dream.DreamOptions())
    whole = _whole(plan)
    whole["kept"] = [list(k) for k in plan.kept]
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    assert _as_json(whole["plan"]) == golden["plan"]
    assert _as_json(whole["kept"]) == golden["kept"]
    assert _as_json(whole["changes"]) == golden["changes"]


@pytest.mark.parametrize("step_changes", [1000, 60])
def test_the_run_writes_what_main_wrote(memory, monkeypatch, tmp_path, step_changes):
    monkeypatch.setenv("MEMCTL_IDS", str(tmp_path / "ids"))
    monkeypatch.setattr(dream_apply, "STEP_CHANGES", step_changes)
    report = dream.run(memory, NOW, dream.DreamOptions(force=True))
    assert (report.l5_before, report.l5_after, report.skipped) == (1821, 1417, 0)
    digest = {name: hashlib.sha256((memory.layout.root / name).read_bytes()).hexdigest()
              for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")}
    assert digest == {"long_term.jsonl": L5_AFTER, "archive.jsonl": L6_AFTER, "dream_log.jsonl": LOG_AFTER[step_changes]}
