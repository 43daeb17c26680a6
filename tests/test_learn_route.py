"""The policy router (memctl.learn.route) with candidates built by hand: merge by fields, a
lower confidence kept as a conflict, corrections, aggregate, append, and idempotence."""

from __future__ import annotations

import json

from durability_helpers import l5, l6
from memctl.core.config import init_root, load_settings
from memctl.learn.candidates import Candidate
from memctl.learn.route import CONFLICT, DONE, candidate_id, route
from memctl.longterm.remember import RememberRequest, remember

NOW = "2026-12-01T10:00:00"


def _src(message: str, session: str = "s1") -> list[dict]:
    return [{"session": session, "message": message}]


def _settings(root, toml: str = ""):
    init_root(root)
    if toml:
        with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
            handle.write(toml)
    return load_settings(root)


def test_the_briefing_preferences_at_8_7_6_keep_the_8_and_show_the_others_as_conflicts(root):
    settings = _settings(root)
    said = [("Dana wants the briefing as bullet points", 8, "m1"), ("Dana wants the briefing as prose", 7, "m2"),
            ("Dana wants the briefing as a table", 6, "m3")]
    routed = route(settings, [Candidate("preference", text, "briefing", conf, _src(mid)) for text, conf, mid in said],
                   NOW, 0)
    assert [r.action for r in routed] == ["added", CONFLICT, CONFLICT]
    [entry] = l5(root)
    assert entry["text"] == "Dana wants the briefing as bullet points" and entry["confidence"] == 8
    assert [c["text"] for c in entry["conflicts"]] == ["Dana wants the briefing as prose",
                                                      "Dana wants the briefing as a table"]
    assert entry["conflicts"][1]["sources"] == _src("m3") and entry["conflicts"][1]["confidence"] == 6


def test_a_newer_statement_replaces_the_fields_it_speaks_about_and_keeps_the_rest(root):
    settings = _settings(root)
    first = Candidate("preference", "Dana wants the briefing at 7am as bullets", "briefing", 7, _src("m1"),
                      fields={"time": "7am", "format": "bullets"})
    later = Candidate("preference", "Dana wants the briefing at 8am", "briefing", 7, _src("m2"), fields={"time": "8am"})
    routed = route(settings, [first, later], NOW, 0)
    assert [r.action for r in routed] == ["added", "superseded"]
    [entry] = l5(root)
    assert entry["fields"] == {"time": "8am", "format": "bullets"}
    assert entry["text"] == "Dana wants the briefing at 8am (also format: bullets)"
    assert entry["sources"] == _src("m1") + _src("m2") and entry["supersedes"] == [candidate_id(first)]
    [old] = l6(root)
    assert old["id"] == candidate_id(first) and old["reason"] == "superseded"


def test_a_lower_confidence_statement_about_another_field_is_merged_not_a_conflict(root):
    settings = _settings(root)
    route(settings, [Candidate("preference", "briefing at 7am", "briefing", 8, _src("m1"), fields={"time": "7am"}),
                     Candidate("preference", "briefing in French", "briefing", 5, _src("m2"),
                               fields={"language": "French"})], NOW, 0)
    [entry] = l5(root)
    assert entry["fields"] == {"time": "7am", "language": "French"} and entry["confidence"] == 8
    assert "conflicts" not in entry


def test_a_correction_supersedes_at_a_lower_confidence_and_the_old_fact_stays_in_l6(root):
    settings = _settings(root)
    route(settings, [Candidate("entity", "Dana's sister is named Ane", "sister", 8, _src("m1"),
                               fields={"name": "Ane"})], NOW, 0)
    fix = Candidate("entity", "Dana's sister is named Ana, not Ane", "sister", 6, _src("m4"), fields={"name": "Ana"},
                    corrects=True)
    [routed] = route(settings, [fix], NOW, 0)
    assert routed.action == "corrected"
    [entry] = l5(root)
    assert entry["text"] == "Dana's sister is named Ana, not Ane" and entry["fields"] == {"name": "Ana"}
    assert entry["confidence"] == 8 and entry["corrects"] == l6(root)[0]["id"]
    assert l6(root)[0]["text"] == "Dana's sister is named Ane"


def test_a_correction_under_another_topic_finds_the_fact_it_corrects(root):
    settings = _settings(root)
    route(settings, [Candidate("preference", "Dana prefers the morning briefing at 7am", "morning briefing", 7,
                               _src("m1"))], NOW, 0)
    route(settings, [Candidate("preference", "Actually Dana prefers the briefing at 8am, not 7am", "briefing at 8am",
                               7, _src("m2"), corrects=True)], NOW, 0)
    [entry] = l5(root)
    assert entry["topic"] == "morning briefing" and "8am" in entry["text"]
    assert [e["text"] for e in l6(root)] == ["Dana prefers the morning briefing at 7am"]


def test_a_correction_whose_fields_hold_only_the_key_still_supersedes(root):
    settings = _settings(root)
    route(settings, [Candidate("preference", "Priya prefers the daily summary as a long email", "daily summary", 7,
                               _src("m1"), fields={"likes": "daily summary"})], NOW, 0)
    route(settings, [Candidate("preference", "Actually, Priya prefers the daily summary as a short Slack message, "
                               "not a long email", "daily summary", 7, _src("m2"), fields={"likes": "daily summary"},
                               corrects=True)], NOW, 0)
    [entry] = l5(root)
    assert "Slack" in entry["text"] and [e["text"] for e in l6(root)] == [
        "Priya prefers the daily summary as a long email"]


def test_a_chinese_correction_under_another_topic_finds_the_fact_it_corrects(root):
    settings = _settings(root)
    old = "王磊更喜欢每天晚上用邮件发一份详细的汇总。"
    route(settings, [Candidate("preference", old, "每天晚上用邮件发一份详细的汇总", 7, _src("m1"))], NOW, 0)
    route(settings, [Candidate("preference", "其实王磊更喜欢每天早上用钉钉发一条简短的汇总，不是晚上的邮件。",
                               "每天早上用钉钉发一条简短的汇总", 7, _src("m2"), corrects=True)], NOW, 0)
    [entry] = l5(root)
    assert "钉钉" in entry["text"] and entry["topic"] == "每天晚上用邮件发一份详细的汇总"
    assert [e["text"] for e in l6(root)] == [old]


def test_routing_the_same_candidates_again_writes_nothing(root):
    settings = _settings(root)
    batch = [Candidate("profile", "Dana lives in Porto", "home", 8, _src("m1")),
             Candidate("preference", "Dana likes tea", "drink", 8, _src("m2")),
             Candidate("preference", "Dana likes coffee", "drink", 5, _src("m3")),
             Candidate("event", "Dana flew to Lisbon on 2026-11-30", "", 6, _src("m4")),
             Candidate("preference", "Dana likes green tea", "drink", 9, _src("m5"))]
    route(settings, batch, NOW, 0)
    files = {name: (root / name).read_bytes() for name in ("long_term.jsonl", "archive.jsonl")}
    again = route(settings, batch, NOW, 0)
    assert {name: (root / name).read_bytes() for name in files} == files
    assert {r.action for r in again} <= {DONE, "seen"}


def test_a_near_duplicate_event_is_seen_once_per_source(root):
    settings = _settings(root)
    event = Candidate("event", "Dana flew to Lisbon on 2026-11-30", "", 6, _src("m1"))
    twin = Candidate("event", "Dana flew to Lisbon on 2026-11-30.", "", 6, _src("m9", "s2"))
    route(settings, [event, twin], NOW, 0)
    route(settings, [twin], NOW, 0)
    [entry] = l5(root)
    assert entry["seen"] == 2 and entry["sources"] == _src("m1") + _src("m9", "s2")


def test_aggregate_keeps_one_entry_per_key_with_dated_facts(root):
    settings = _settings(root, '\n[types.history]\npolicy = "aggregate"\n')
    facts = [Candidate("history", "Ana moved to Lisbon", "Ana", 6, _src("m1"), time="2026-03-01T10:00:00"),
             Candidate("history", "Ana started a job at the port", "Ana", 6, _src("m2"), time="2026-05-02T10:00:00"),
             Candidate("history", "Ana got a dog", "Ana", 6, _src("m3"), time="2026-04-10T10:00:00")]
    route(settings, facts, NOW, 0)
    route(settings, facts, NOW, 0)
    [entry] = l5(root)
    assert [(f["date"], f["text"]) for f in entry["facts"]] == [
        ("2026-03-01", "Ana moved to Lisbon"), ("2026-04-10", "Ana got a dog"),
        ("2026-05-02", "Ana started a job at the port")]
    assert entry["facts"][0]["sources"] == _src("m1")
    assert entry["text"].startswith("Ana: 2026-03-01 Ana moved to Lisbon; 2026-04-10")


def test_remember_aggregates_too(root):
    settings = _settings(root, '\n[types.history]\npolicy = "aggregate"\n')
    for text in ("Ana moved to Lisbon", "Ana got a dog"):
        remember(settings, RememberRequest(text, "history", "Ana"), NOW, 0)
    [entry] = l5(root)
    assert len(entry["facts"]) == 2 and entry["seen"] == 2


def test_a_forgotten_fact_is_skipped_with_a_note_and_the_rest_is_written(run, root):
    settings = _settings(root)
    [first] = route(settings, [Candidate("event", "Dana sold the old car", "", 6, _src("m1"))], NOW, 0)
    assert run("forget", first.entry_id, "--reason", "wrong", root=root).returncode == 0
    routed = route(settings, [Candidate("event", "Dana sold the old car", "", 6, _src("m7")),
                              Candidate("event", "Dana bought a bike", "", 6, _src("m8"))], NOW, 0)
    assert routed[0].action == "skipped" and "forgotten" in routed[0].note
    assert [e["text"] for e in l5(root)] == ["Dana bought a bike"]


def test_an_unknown_type_is_skipped_with_a_note(root):
    settings = _settings(root)
    [routed] = route(settings, [Candidate("gossip", "x", "", 5, _src("m1"))], NOW, 0)
    assert routed.action == "skipped" and "unknown entry type" in routed.note and l5(root) == []


def test_show_prints_sources_and_conflicts(run, root):
    settings = _settings(root)
    routed = route(settings, [Candidate("preference", "briefing as bullets", "briefing", 8, _src("u1")),
                              Candidate("preference", "briefing as prose", "briefing", 6, _src("u2"))], NOW, 0)
    shown = run("show", routed[0].entry_id, root=root)
    assert shown.returncode == 0, shown.stderr
    entry = json.loads(shown.stdout)
    assert entry["sources"] == _src("u1") and entry["conflicts"][0]["text"] == "briefing as prose"


def test_an_aggregate_past_its_cap_moves_its_history_to_l6(root):
    from memctl.longterm.remember import MAX_FACTS

    settings = _settings(root, '\n[types.history]\npolicy = "aggregate"\n')
    facts = [Candidate("history", f"Ana visit number {i}", "Ana", 6, _src(f"m{i}"), time="2026-01-01T10:00:00")
             for i in range(MAX_FACTS + 1)]
    routed = route(settings, facts, NOW, 0)
    assert routed[-1].action == "superseded"
    [entry] = l5(root)
    assert len(entry["facts"]) == MAX_FACTS and entry["id"] == candidate_id(facts[-1])
    [old] = l6(root)
    assert len(old["facts"]) == MAX_FACTS and entry["supersedes"] == [old["id"]]
    assert route(settings, facts[-1:], NOW, 0)[0].action == DONE


def test_a_scope_keeps_two_namespaces_keys_apart_and_marks_every_entry(root):
    from memctl.learn.route import Scope

    settings = _settings(root)
    team_a = Scope({"namespace": "a", "key": "agent-a"}, "a/")
    team_b = Scope({"namespace": "b", "key": "agent-b"}, "b/")
    route(settings, [Candidate("preference", "Dana wants the briefing at 7am", "briefing", 8, _src("m1"))], NOW, 0,
          team_a)
    route(settings, [Candidate("preference", "Eve wants the briefing at 9am", "briefing", 6, _src("m1", "s2"))], NOW, 0,
          team_b)
    route(settings, [Candidate("preference", "Eve wants the briefing at 9am", "eve", 6, _src("m9", "s3"))], NOW, 0,
          team_a)  # the same words in the other namespace, written later: a correction in b must not touch it
    fix = Candidate("preference", "Actually Eve wants the briefing at 10am, not 9am", "briefing time", 6,
                    _src("m2", "s2"), corrects=True)
    route(settings, [fix], NOW, 0, team_b)
    entries = {e["topic"]: e for e in l5(root)}
    assert set(entries) == {"a/briefing", "b/briefing", "a/eve"}
    assert entries["a/briefing"]["namespace"] == "a" and entries["a/briefing"]["key"] == "agent-a"
    assert "7am" in entries["a/briefing"]["text"] and "10am" in entries["b/briefing"]["text"]
    assert [e["text"] for e in l6(root)] == ["Eve wants the briefing at 9am"]


def test_a_preference_whose_subject_was_not_named_is_kept_keyed_by_its_words(root):
    settings = _settings(root)
    batch = [Candidate("preference", "小王觉得这家餐厅的菜太辣了", "", 6, _src("m1")),
             Candidate("preference", "小王觉得周末去爬山很好", "", 6, _src("m2"))]
    routed = route(settings, batch, NOW, 0)
    assert [r.action for r in routed] == ["added", "added"]
    assert sorted(e["text"] for e in l5(root)) == sorted(c.text for c in batch)
    assert all(e["topic"] for e in l5(root))
    again = route(settings, batch, NOW, 0)
    assert {r.action for r in again} <= {DONE}
