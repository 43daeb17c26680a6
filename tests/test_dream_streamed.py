"""The dream plans over lean L5 rows (a line and an id, each entry parsed when a rule needs
it: issue #13, a dream of a million entries). The plan it makes must be the plan made with
every entry held in memory, change for change, on a memory where every rule has work.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

import pytest

from memctl.core.config import init_root, load_settings
from memctl.longterm import dream
from memctl.longterm.entries import LeanRow
from memctl.longterm.store import open_store

NOW = datetime(2026, 6, 1, 4, 0, 0)
WORDS = ("deploy cache token backup restore config database index query session archive timeout "
         "proxy certificate cluster pipeline release branch review latency dashboard schema queue "
         "部署 缓存 备份 配置 索引 会话 归档 超时 代理 证书 集群 发布 分支 延迟 迁移 队列").split()
# what main's planner (every entry held) made of this memory; the streamed plan must agree
EXPECTED_COUNTS = {"refs": 39, "forget": 178, "consolidate": 165, "archive": 99, "merge": 34}


def _stamp(rng: random.Random) -> str:
    days = rng.uniform(0, 20) if rng.random() < 0.85 else rng.uniform(31, 150)
    return (NOW - timedelta(days=days)).isoformat(timespec="seconds")


def _lines(rng: random.Random, count: int) -> list[str]:
    """L5 as lines: plain notes, planted near-duplicates, merge-key versions, supersede and
    contradict links, mergeable topics, one line that is not an entry and one id twice."""
    out: list[dict] = []
    for k in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) + f" v{k % 50}"
        base = {"id": f"e{k:05d}", "text": text, "type": rng.choice(["event", "case", "lesson", "decision"]),
                "created": (when := _stamp(rng)), "updated": when, "refs": rng.choice([0, 0, 1, 3])}
        out.append(base)
        if k % 25 == 0:  # a planted group of near-duplicates
            out += [dict(base, id=f"e{k:05d}d{j}", text=base["text"].lower() + "!" * j) for j in (1, 2)]
        if k % 40 == 0:  # versions of one merge key: the older ones are superseded
            out += [{"id": f"p{k:05d}v{j}", "text": f"prefers editor {j} for {k}", "type": "preference",
                     "topic": f"Editor {k}", "created": f"2026-05-{10 + j:02d}T08:00:00"} for j in range(3)]
        if k % 60 == 0:  # supersede and contradict links
            out.append({"id": f"s{k:05d}", "text": f"replaces note {k}", "type": "lesson",
                        "supersedes": [f"e{k:05d}"], "created": "2026-05-29T08:00:00"})
            out.append({"id": f"c{k:05d}", "text": f"contradicts note {k + 1}", "type": "lesson",
                        "contradicts": f"e{k + 1:05d}", "created": "2026-05-29T08:00:00"})
        if k % 90 == 0:  # a topic with confident entries: the merge rule
            out += [{"id": f"m{k:05d}t{j}", "text": f"team ritual {j} of {k}", "type": "lesson",
                     "topic": f"ritual {k}", "confidence": 8, "created": "2026-05-20T08:00:00"} for j in range(2)]
    lines = [json.dumps(e, ensure_ascii=False) for e in out]
    lines.insert(len(lines) // 2, '{"id": "broken", "text": 3}')  # not an entry: kept as it is
    # keys spelled with escapes: still a topic and a link (the planner may not skip these lines)
    lines.append('{"id": "esc1", "text": "prefers tabs", "type": "preference", "\\u0074opic": "Editor 0", '
                 '"created": "2026-05-31T08:00:00"}')
    lines.append('{"id": "esc2", "text": "newer note", "type": "lesson", "sup\\u0065rsedes": ["e00002"], '
                 '"created": "2026-05-31T08:00:00"}')
    lines.append(json.dumps(out[7], ensure_ascii=False))  # an id on two lines
    return lines


@pytest.fixture
def memory(root, monkeypatch):
    init_root(root)
    rng = random.Random(13)
    (root / "long_term.jsonl").write_text("".join(line + "\n" for line in _lines(rng, 1500)))
    refs_log = root / ".memctl" / "refs.log"
    refs_log.parent.mkdir(exist_ok=True)
    refs_log.write_text("".join(f"2026-05-{rng.randint(1, 31):02d}T09:00:00\te{rng.randrange(1500):05d}\n"
                                for _ in range(40)))
    (root / "L4_raw_sessions").mkdir(exist_ok=True)
    monkeypatch.setenv("MEMCTL_NOW", NOW.isoformat())
    return load_settings(root)


def _plan_in_full(settings, monkeypatch, counter):
    monkeypatch.setenv("MEMCTL_IDS", str(counter))
    layout = settings.layout
    entries = open_store(layout).active.snapshot().entries  # every entry parsed and held
    return dream.plan(entries, dream.load_refs(layout), settings, NOW, dream.OPS,
                      dream.recent_history(layout), None)


def _plan_streamed(settings, monkeypatch, counter):
    monkeypatch.setenv("MEMCTL_IDS", str(counter))
    return dream.plan_now(settings, NOW, dream.DreamOptions())


def _whole(plan) -> dict:
    return {"plan": plan.to_dict(), "kept": plan.kept,
            "changes": [(c.op, c.reason, [e.to_dict() for e in c.before], [e.to_dict() for e in c.after])
                        for c in plan.changes]}


def test_the_streamed_plan_is_the_plan_made_with_every_entry_held(memory, monkeypatch, tmp_path):
    full = _plan_in_full(memory, monkeypatch, tmp_path / "ids-full")
    streamed = _plan_streamed(memory, monkeypatch, tmp_path / "ids-streamed")
    assert streamed.counts() == full.counts() == EXPECTED_COUNTS
    assert _whole(streamed) == _whole(full)
    assert len(streamed.kept) > 1000 and streamed.l5_count == full.l5_count


def test_a_lean_snapshot_keeps_lines_and_ids_only_and_still_reads_each_entry(memory):
    snapshot = open_store(memory.layout).active.snapshot(lean=True)
    lean = [row for row in snapshot.rows if isinstance(row, LeanRow)]
    assert snapshot.data is None and len(lean) == len(snapshot.rows) - 1  # the broken line has no entry
    assert all("entry" not in vars(row) for row in lean)
    full = open_store(memory.layout).active.snapshot()
    assert [row.raw for row in snapshot.rows] == [row.raw for row in full.rows]
    assert [row.entry for row in snapshot.rows] == [row.entry for row in full.rows]
    assert snapshot.begins(full.data) and not snapshot.begins(full.data[:-1] + b"x")
