"""The dream planner, rule by rule with a fixed clock, and the run: audit, undo, guard rail."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from memctl.longterm import dream, dream_apply
from memctl.core.config import init_root, load_settings
from memctl.longterm.entries import Entry, write_entries
from memctl.longterm.refs import record_refs

NOW = datetime(2026, 6, 1, 4, 0, 0)
RECENT = "2026-05-30T10:00:00"
OLD = "2026-01-01T10:00:00"  # 151 days before NOW


@pytest.fixture
def settings(root):
    init_root(root)
    return load_settings(root)


def entry(id_, text, type_="event", created=RECENT, **kw) -> Entry:
    return Entry(id=id_, text=text, type=type_, created=created, updated=created, **kw)


def plan_of(settings, entries, ops=dream.OPS, refs=None, history=()):
    return dream.plan(entries, refs or dream.Refs(), settings, NOW, ops, history)


def removed(plan, op):
    return sorted(e.id for c in plan.changes if c.op == op for e in c.removed)


def test_consolidation_three_paraphrases_become_one_entry_with_3x_and_sources(settings):
    entries = [
        entry("a", "Always run the database migrations before deploying the API", "lesson", source="s-0412"),
        entry("b", "always run database migrations before deploying the api!", "lesson", source="s-0419"),
        entry("c", "Always run the database migration before you deploy the API", "lesson", source="s-0501"),
        entry("d", "The CI cache lives in /var/cache/ci on bk-02", "lesson"),
    ]
    plan = plan_of(settings, entries, ops=["consolidate"])
    [change] = plan.changes
    assert change.op == "consolidate" and sorted(e.id for e in change.removed) == ["a", "b", "c"]
    [new] = change.added
    assert new.seen == 3 and new.note == "3× verified" and "3×" in change.reason
    assert sorted(new.consolidated_from) == ["a", "b", "c"]
    assert new.source == "s-0412; s-0419; s-0501"
    assert ("d", "written 2026-05-30") in plan.kept


def test_two_similar_fragments_are_not_enough_but_history_lines_count(settings):
    entries = [entry("a", "用户偏好 dark mode in every editor", "lesson"),
               entry("b", "用户偏好 dark mode in every editor.", "lesson")]
    assert plan_of(settings, entries, ops=["consolidate"]).changes == []
    history = [("0412_0900-0412_0930", "用户偏好 Dark mode in every editor")]
    [change] = plan_of(settings, entries, ops=["consolidate"], history=history).changes
    assert change.added[0].seen == 3 and "L4:0412_0900-0412_0930" in change.added[0].source


def test_archive_contextual_entries_without_references_for_30_days(settings):
    entries = [
        entry("old-event", "deployed v1.2 to staging", "event", created="2026-04-20T10:00:00"),
        entry("old-but-used", "deployed v1.1 to staging", "event", created="2026-04-20T10:00:00",
              refs=1, last_ref="2026-05-20T10:00:00"),
        entry("new-event", "deployed v1.3 to staging", "event"),
        entry("old-lesson", "staging needs a VPN", "lesson", created="2026-04-20T10:00:00"),
    ]
    plan = plan_of(settings, entries, ops=["archive"])
    assert removed(plan, "archive") == ["old-event"]
    assert "no reference in 30 days" in plan.changes[0].reason


def test_forget_unused_for_90_days(settings):
    entries = [
        entry("stale", "the old build server is bk-01", "lesson", created=OLD, refs=1, last_ref="2026-05-01T00:00:00"),
        entry("used", "the build server is bk-02", "lesson", created=OLD, refs=5),
        entry("young", "the wiki moved to notion", "lesson", created="2026-04-01T00:00:00"),
    ]
    refs = dream.Refs(recent={"used": ["2026-05-02T00:00:00", "2026-05-20T00:00:00"]})
    plan = plan_of(settings, entries, ops=["forget"], refs=refs)
    assert removed(plan, "forget") == ["stale"]
    assert "1 references in 90 days (< 2)" in plan.changes[0].reason


def test_forget_superseded_and_contradicted(settings):
    entries = [
        entry("v1", "deploys go through jenkins", "decision"),
        entry("v2", "deploys go through github actions", "decision", supersedes=["v1"]),
        entry("p-old", "editor is vim", "preference", topic="editor", created="2026-05-01T00:00:00"),
        entry("p-new", "editor is helix", "preference", topic="editor"),
        entry("claim", "the API has no rate limit", "lesson"),
        entry("fix", "the API is rate limited to 100 req/s", "lesson", extra={"contradicts": ["claim"]}),
    ]
    plan = plan_of(settings, entries, ops=["forget"])
    reasons = {c.removed[0].id: c.reason for c in plan.changes}
    assert reasons == {"v1": "superseded by v2", "claim": "contradicted by fix", "p-old": "superseded by newer p-new"}


def test_merge_same_type_and_topic_with_high_confidence(settings):
    entries = [
        entry("m1", "bk-02 runs the nightly backups", "lesson", topic="bk-02", confidence=8, created="2026-05-01T00:00:00"),
        entry("m2", "bk-02 has 64 GB of RAM", "lesson", topic="bk-02", confidence=9),
        entry("m3", "bk-02 might be retired", "lesson", topic="bk-02", confidence=4),
        entry("m4", "bk-03 is the mail relay", "lesson", topic="bk-03", confidence=9),
    ]
    plan = plan_of(settings, entries, ops=["merge"])
    [change] = plan.changes
    assert sorted(e.id for e in change.removed) == ["m1", "m2"]
    [new] = change.added
    assert new.text == "bk-02 runs the nightly backups; bk-02 has 64 GB of RAM"
    assert new.merged_from == ["m1", "m2"] and new.confidence == 9 and new.topic == "bk-02"


def test_references_from_the_log_are_folded_and_keep_an_entry(settings):
    layout = settings.layout
    write_entries(layout.long_term, [entry("x", "bk-02 is the build host", "lesson", created=OLD)])
    record_refs(layout.refs_log, ["x", "x"], "2026-05-15T00:00:00")
    refs = dream.load_refs(layout)
    plan = plan_of(settings, [entry("x", "bk-02 is the build host", "lesson", created=OLD)], refs=refs)
    assert [c.op for c in plan.changes] == ["refs"]
    assert plan.changes[0].after[0].refs == 2 and plan.changes[0].after[0].last_ref == "2026-05-15T00:00:00"


# --- whole runs through the CLI


def seed(root: Path, entries: list[Entry]) -> None:
    write_entries(root / "long_term.jsonl", entries)


def run_env():
    return {"MEMCTL_NOW": NOW.isoformat()}


def test_undo_restores_l5_and_l6_byte_for_byte(run, root, settings):
    entries = [entry(f"n{i}", f"note number {i} about topic {i * 7919 % 1000}", "lesson") for i in range(30)]
    entries[5:5] = [entry("a", "Always run the migrations before deploying the api", "case", source="s1"),
                    entry("b", "always run migrations before deploying the API!", "case", source="s2")]
    entries[20:20] = [entry("c", "Always run the migration before deploying the api", "case", source="s3"),
                      entry("old", "deployed v0.9", "event", created=OLD),
                      entry("v1", "deploys via jenkins", "decision")]
    entries.append(entry("v2", "deploys via actions", "decision", supersedes=["v1"]))
    entries += [entry("m1", "bk-02 backs up", "lesson", topic="bk-02", confidence=8),
                entry("m2", "bk-02 has 64 GB", "lesson", topic="bk-02", confidence=8)]
    seed(root, entries)
    (root / "archive.jsonl").write_text(json.dumps({"id": "z", "text": "earlier", "type": "event",
                                                    "reason": "forgotten"}) + "\n")
    record_refs(root / ".memctl" / "refs.log", ["n1", "n2", "n1"], "2026-05-31T00:00:00")
    l5_before = (root / "long_term.jsonl").read_bytes()
    l6_before = (root / "archive.jsonl").read_bytes()
    done = run("dream", "--json", "--force", root=root, env=run_env())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"refs": 2, "consolidate": 3, "archive": 1, "forget": 1, "merge": 2}
    l5_after = (root / "long_term.jsonl").read_bytes()
    assert l5_after != l5_before and (root / "archive.jsonl").read_bytes() != l6_before
    log = [json.loads(x) for x in (root / "dream_log.jsonl").read_text().splitlines()]
    ops = {r["op"] for r in log if r["run"] == report["run"]}
    assert {"start", "refs", "consolidate", "archive", "forget", "merge", "end"} <= ops
    assert all({"run", "op", "ids", "before", "after", "reason"} <= set(r) for r in log if r["op"] in dream.OPS)
    undo = run("dream", "--undo", report["run"], "--json", root=root, env=run_env())
    assert undo.returncode == 0, undo.stderr
    assert (root / "long_term.jsonl").read_bytes() == l5_before
    assert (root / "archive.jsonl").read_bytes() == l6_before
    assert (root / ".memctl" / "refs.offset").read_text().strip() == "0"
    again = run("dream", "--undo", report["run"], root=root, env=run_env())
    assert again.returncode == 2 and b"already undone" in again.stderr


def test_guard_rail_stops_a_run_that_would_forget_half_of_l5(run, root, settings):
    entries = [entry(f"o{i}", f"old unused fact {i} about host bk-{i:02d}", "lesson", created=OLD) for i in range(10)]
    entries += [entry(f"n{i}", f"recent fact {i} about host bk-{i:02d}", "lesson") for i in range(10)]
    seed(root, entries)
    before = (root / "long_term.jsonl").read_bytes()
    stopped = run("dream", root=root, env=run_env())
    assert stopped.returncode == 2
    message = stopped.stderr.decode()
    assert "would remove 10 of 20 L5 entries (50%" in message and "--force" in message
    assert (root / "long_term.jsonl").read_bytes() == before
    assert (root / "archive.jsonl").read_bytes() == b""
    assert not (root / "dream_log.jsonl").exists()
    dry = run("dream", "--dry-run", root=root, env=run_env())
    assert dry.returncode == 0 and dry.stdout.count(b"would forget: o") == 10
    forced = run("dream", "--force", "--json", root=root, env=run_env())
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["counts"] == {"forget": 10}
    assert len((root / "long_term.jsonl").read_text().splitlines()) == 10


def test_dry_run_plan_in_borg_style_and_json(run, root, settings):
    seed(root, [entry("old", "deployed v0.9", "event", created=OLD), entry("new", "deployed v1.0", "event")])
    (root / "memctl.toml").write_text("[dream]\nmax_remove_share = 0.5\n")
    dry = run("dream", "--dry-run", "-v", root=root, env=run_env())
    out = dry.stdout.decode()
    assert "would archive: old (contextual, no reference in 30 days)" in out
    assert "keeping: new (rule: written 2026-05-30)" in out
    as_json = json.loads(run("dream", "--dry-run", "--json", root=root, env=run_env()).stdout)
    assert as_json["counts"] == {"archive": 1} and as_json["net_removed"] == 1
    assert run("dream", "--only", "merge", root=root, env=run_env()).returncode == 0
    assert b"old" in (root / "long_term.jsonl").read_bytes()
    assert run("dream", "--only", "nap", root=root).returncode == 2


def test_undo_in_place_across_many_small_steps(settings, monkeypatch):
    monkeypatch.setattr(dream_apply, "STEP_CHANGES", 2)
    monkeypatch.setattr(dream_apply, "MAX_STEPS", 100)
    layout = settings.layout
    entries = []
    for i in range(40):
        old = i % 3 == 0  # runs of removed neighbours, first and last lines included
        entries.append(entry(f"e{i:02d}", f"fact {i} about service {i * 37 % 101}", "event",
                             created=OLD if old else RECENT))
    write_entries(layout.long_term, entries)
    before = layout.long_term.read_bytes()
    report = dream.run(settings, NOW, dream.DreamOptions(force=True))
    assert report.steps > 5 and report.counts == {"archive": 14}
    dream.undo(settings, report.run, NOW, 5)
    assert layout.long_term.read_bytes() == before
    assert layout.cold_archive.read_bytes() == b""


def test_summarizer_writes_the_merged_text_and_a_missing_root_is_refused(settings, run, tmp_path):
    entries = [entry("m1", "bk-02 backs up", "lesson", topic="bk-02", confidence=8),
               entry("m2", "bk-02 has 64 GB", "lesson", topic="bk-02", confidence=9)]
    plan = dream.plan(entries, dream.Refs(), settings, NOW, ["merge"], summarizer="tr a-z A-Z")
    assert plan.changes[0].added[0].text == "BK-02 BACKS UP\nBK-02 HAS 64 GB"
    failing = dream.plan(entries, dream.Refs(), settings, NOW, ["merge"], summarizer="false")
    assert failing.changes[0].added[0].text == "bk-02 backs up; bk-02 has 64 GB"
    nowhere = run("dream", root=tmp_path / "nowhere")
    assert nowhere.returncode == 2 and b"memctl" in nowhere.stderr and b"init" in nowhere.stderr
    assert not (tmp_path / "nowhere").exists()


def test_remember_contradicts_then_dream_forgets_the_old_claim(run, root, settings):
    claim = run("remember", "the API has no rate limit", "--type", "lesson", root=root, env=run_env())
    claim_id = claim.stdout.decode().strip()
    fix = run("remember", "the API allows 100 requests a second", "--type", "lesson", "--contradicts", claim_id,
              root=root, env=run_env())
    assert fix.returncode == 0, fix.stderr
    (root / "memctl.toml").write_text("[dream]\nmax_remove_share = 0.5\n")
    dry = run("dream", "--dry-run", root=root, env=run_env())
    assert f"would forget: {claim_id} (contradicted by {fix.stdout.decode().strip()})".encode() in dry.stdout
