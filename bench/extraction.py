#!/usr/bin/env python3
"""What extraction keeps of a conversation (issue #29): coverage of the gold facts, recall of
the questions' evidence when searching the learned entries alone, bytes kept, time per turn.

    .venv/bin/python bench/extraction.py [--only locomo|memdaily] [--bench-dir ../shared/bench]
        [--extractor rules|scripted-model] [--via-turn] [--no-search]

LoCoMo (English): every session's turns go through `memctl.learn.extract.extract_candidates`
one turn at a time (id = dia_id, speaker, time = the session's date; a shared image as
"[image: caption]", as bench/retrieval.py indexes it), as a session layer calling
it after each turn would. A gold observation is covered when its evidence turn is the source of
at least one candidate. R@10: the candidates are imported into a scratch memory (`memctl import`,
id `<sample>|<turn>#<n>`, so an entry counts for the turn it came from) and every QA question
searched there (`memctl search --queries`, lexical) beside the same search over the raw turns
(bench/retrieval.py's memories). Bytes: the candidates' texts over the raw turns' "speaker: text".
MemDaily (Chinese): the same per pooled qa_type x scenario, its `target_step_id` messages as
the evidence. Precision: the share of learned entries (an entry once per turn it came from) whose
turn is the evidence turn of at least one gold fact (MemDaily: a target message), beside the share of
all turns that are, which is what keeping every turn would score. `--extractor scripted-model` runs the model path against a local endpoint that
answers one event per message naming its id, and one candidate naming an invented id: it shows
the wiring (the ids validated, the invented one dropped), not a quality figure. `--via-turn`
feeds every session through the installed `memctl turn` and `memctl dispose` instead (one memory
per conversation or pool) and measures what L5 holds at the end, the policy router included.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from retrieval import (DEFAULT_BENCH, import_memory, locomo_sets, memctl_command, memdaily_sets,  # noqa: E402
                       search_memory)

from memctl.core.config import init_root, load_settings  # noqa: E402
from memctl.learn.candidates import Message  # noqa: E402
from memctl.learn.extract import extract_candidates  # noqa: E402

K = 10
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def iso_time(said: str) -> str:
    """"1:56 pm on 8 May, 2023" or "2024年04月01日 周一 08:30" as ISO 8601 ("" when neither)."""
    match = re.match(r"(\d{1,2}):(\d{2})\s*([ap]m) on (\d{1,2}) (\w+),? (\d{4})", said, re.IGNORECASE)
    if match:
        hour = int(match[1]) % 12 + (12 if match[3].lower() == "pm" else 0)
        month = next(n for n, name in enumerate(_MONTHS, 1) if name.startswith(match[5].lower()[:3]))
        return f"{match[6]}-{month:02d}-{int(match[4]):02d}T{hour:02d}:{match[2]}:00"
    match = re.match(r"(\d{4})年(\d{1,2})月(\d{1,2})日\D*(\d{1,2}):(\d{2})", said)
    if match:
        return f"{match[1]}-{int(match[2]):02d}-{int(match[3]):02d}T{int(match[4]):02d}:{match[5]}:00"
    return ""


# ---------------------------------------------------------------- datasets -> sessions, evidence

def locomo_conversations(path: Path):
    """Per conversation: (name, sessions of Messages, gold facts as sets of turn ids, raw docs,
    questions); turn ids as bench/retrieval.py names them (`<sample>|D1:3`)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = {name: (docs, questions) for name, docs, questions in locomo_sets(path)}
    for conv in data:
        sample, talk = conv["sample_id"], conv["conversation"]
        sessions = []
        for key in sorted(talk, key=lambda k: (len(k), k)):
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(talk[key], list):
                continue
            when = iso_time(talk.get(f"{key}_date_time", ""))
            sessions.append([Message(f"{sample}/D{match[1]}", _turn_id(turn["dia_id"]), position, "user",
                                     _with_image(turn), when, turn["speaker"])
                             for position, turn in enumerate(talk[key])])
        gold = []
        for facts_by_speaker in conv["observation"].values():
            for facts in facts_by_speaker.values():
                for _fact, evidence in facts:
                    turns = {f"D{int(s)}:{int(t)}" for s, t in re.findall(r"D:?(\d+):(\d+)", str(evidence))}
                    gold.append({f"{sample}|{turn}" for turn in turns})
        docs, questions = raw[sample]
        yield sample, sessions, gold, docs, questions


def _with_image(turn: dict) -> str:
    """The turn's text with the image it shares described, as bench/retrieval.py indexes it."""
    return turn["text"] + (f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def _turn_id(dia_id: str) -> str:
    session, turn = re.match(r"D:?(\d+):(\d+)", dia_id).groups()
    return f"D{int(session)}:{int(turn)}"


def memdaily_pools(path: Path):
    """Per qa_type x scenario pool: (name, sessions (one per trajectory), target messages as gold,
    raw docs, questions), ids as bench/retrieval.py names them."""
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = {name: (docs, questions) for name, docs, questions in memdaily_sets(path)}
    for qa_type, scenarios in data.items():
        for scenario, trajectories in scenarios.items():
            name = f"{qa_type}/{scenario}"
            sessions, gold = [], []
            for trajectory in trajectories:
                prefix = f"{qa_type}|{scenario}|{trajectory['tid']}"
                sessions.append([Message(prefix, str(m["mid"]), n, "user", m["message"], iso_time(m.get("time", "")))
                                 for n, m in enumerate(trajectory["message_list"])])
                gold.extend({f"{prefix}|{mid}"} for mid in trajectory["QA"].get("target_step_id") or [])
            docs, questions = raw[name]
            yield name, sessions, gold, docs, questions


def _doc_id(message: Message, dataset: str) -> str:
    if dataset == "locomo":
        return f"{message.session.split('/')[0]}|{message.id}"
    return f"{message.session}|{message.id}"


# ---------------------------------------------------------------- extraction

class Extracted:
    def __init__(self):
        self.by_turn: dict[str, list[str]] = {}
        self.millis: list[float] = []
        self.turns = 0
        self.notes: dict[str, int] = {}


def run_extractor(settings, sessions: list[list[Message]], dataset: str, per_session: bool) -> Extracted:
    """Every turn through the extractor (one call per turn, or per session for a model)."""
    out = Extracted()
    for session in sessions:
        batches = [session] if per_session else [[message] for message in session]
        for batch in batches:
            started = time.perf_counter()
            candidates, notes = extract_candidates(settings, batch)
            out.millis.append(1000 * (time.perf_counter() - started) / len(batch))
            for note in notes:
                out.notes[note] = out.notes.get(note, 0) + 1
            for candidate in candidates:
                for source in candidate.sources:
                    message = next(m for m in batch if m.id == source["message"])
                    out.by_turn.setdefault(_doc_id(message, dataset), []).append(candidate.text)
        out.turns += len(session)
    return out


def learned_docs(extracted: Extracted, raw_docs: list[dict]) -> list[dict]:
    """The entries as import items, with the date and session of the turn they came from (as an
    entry's provenance gives them), so search treats them as it treats the raw turns."""
    raw = {doc["id"]: doc for doc in raw_docs}
    return [{"id": f"{turn}#{n}", "text": text, "date": raw[turn]["date"], "session": raw[turn]["session"]}
            for turn, texts in extracted.by_turn.items() for n, text in enumerate(texts)]


def run_memctl_turn(sessions: list[list[Message]], dataset: str, config: str) -> Extracted:
    """Every session through the installed command line, as an agent would: `memctl turn --session
    S --file F` with its messages as JSON Lines, then `memctl dispose --session S`; what was
    learned is what L5 holds at the end (a merge type's entry superseded by a later one counts for
    the later one only), each entry for the turns its `sources` name."""
    from memctl.core.config import Layout
    from memctl.longterm.store import open_store

    out = Extracted()
    workdir = Path(tempfile.mkdtemp(prefix="memctl-extract-turn-"))
    try:
        root, cmd = workdir / "memory", memctl_command()
        subprocess.run([*cmd, "--root", str(root), "init"], check=True, capture_output=True)
        if config:
            (root / "memctl.toml").write_text(config, encoding="utf-8")
        turn_of = {}
        for number, session in enumerate(sessions):
            batch = workdir / f"session-{number}.jsonl"
            batch.write_text("".join(json.dumps({"id": m.id, "role": m.role, "content": m.content, "time": m.time,
                                                 "speaker": m.speaker}, ensure_ascii=False) + "\n"
                                     for m in session), encoding="utf-8")
            started = time.perf_counter()
            for args in (["turn", "--session", session[0].session, "--file", str(batch)],
                         ["dispose", "--session", session[0].session]):
                done = subprocess.run([*cmd, "--root", str(root), *args, "--json"], capture_output=True, timeout=600)
                if done.returncode != 0:
                    sys.exit(f"memctl {args[0]} failed: {done.stderr.decode()}")
                for note in json.loads(done.stdout).get("notes", []):
                    out.notes[note] = out.notes.get(note, 0) + 1
            out.millis.extend([1000 * (time.perf_counter() - started) / len(session)] * len(session))
            out.turns += len(session)
            turn_of.update({(m.session, m.id): _doc_id(m, dataset) for m in session})
        for entry in open_store(Layout(root)).active.iter():
            for source in entry.extra.get("sources") or []:
                turn = turn_of.get((source.get("session"), source.get("message")))
                if turn is not None:
                    out.by_turn.setdefault(turn, []).append(entry.text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


# ---------------------------------------------------------------- figures

class Figures:
    def __init__(self):
        self.gold = self.covered = 0
        self.precise = self.evidence_turns = self.raw_turns = 0
        self.raw_bytes = self.learned_bytes = 0
        self.millis: list[float] = []
        self.turns = self.entries = 0
        self.recall = {"learned": [], "raw": []}
        self.notes: dict[str, int] = {}

    def add(self, extracted: Extracted, gold: list[set[str]], raw_docs: list[dict]) -> None:
        self.gold += len(gold)
        self.covered += sum(1 for turns in gold if any(turn in extracted.by_turn for turn in turns))
        evidence = set().union(*gold)
        self.precise += sum(len(texts) for turn, texts in extracted.by_turn.items() if turn in evidence)
        self.evidence_turns += sum(1 for doc in raw_docs if doc["id"] in evidence)
        self.raw_turns += len(raw_docs)
        self.raw_bytes += sum(len(doc["text"].encode("utf-8")) for doc in raw_docs)
        self.learned_bytes += sum(len(t.encode("utf-8")) for texts in extracted.by_turn.values() for t in texts)
        self.millis.extend(extracted.millis)
        self.turns += extracted.turns
        self.entries += sum(len(texts) for texts in extracted.by_turn.values())
        for note, count in extracted.notes.items():
            self.notes[note] = self.notes.get(note, 0) + count

    def add_recall(self, system: str, ranked: dict[str, list[str]], questions: list[dict]) -> None:
        for q in questions:
            turns = [hit.split("#")[0] for hit in ranked.get(q["qid"], [])[:K]]
            self.recall[system].append(len(set(turns) & q["relevant"]) / len(q["relevant"]))

    def rows(self) -> list[tuple[str, str]]:
        p50 = statistics.median(self.millis) if self.millis else 0.0
        p95 = statistics.quantiles(self.millis, n=20)[-1] if len(self.millis) > 1 else p50
        rows = [("coverage (gold facts whose evidence turn gave an entry)", f"{self.covered / max(self.gold, 1):.3f} "
                 f"({self.covered}/{self.gold})"),
                ("precision (learned entries whose turn is a gold fact's evidence turn)",
                 f"{self.precise / max(self.entries, 1):.3f} ({self.precise}/{self.entries})"),
                ("evidence turns / all turns (the precision of keeping every turn)",
                 f"{self.evidence_turns / max(self.raw_turns, 1):.3f} ({self.evidence_turns}/{self.raw_turns})"),
                ("learned bytes / raw bytes", f"{self.learned_bytes / max(self.raw_bytes, 1):.3f}"),
                ("entries per turn", f"{self.entries / max(self.turns, 1):.3f} ({self.entries}/{self.turns})"),
                ("ms per turn p50 / p95", f"{p50:.3f} / {p95:.3f}")]
        for system in ("learned", "raw"):
            if self.recall[system]:
                rows.append((f"R@{K} searching the {system} {'entries' if system == 'learned' else 'turns'}",
                             f"{statistics.fmean(self.recall[system]):.3f} ({len(self.recall[system])} questions)"))
        if self.recall["learned"] and self.recall["raw"]:
            ratio = statistics.fmean(self.recall["learned"]) / max(statistics.fmean(self.recall["raw"]), 1e-9)
            rows.append(("learned R@10 / raw R@10", f"{ratio:.3f}"))
        rows.extend((f"note ({count}x)", note) for note, count in self.notes.items())
        return rows


def evaluate(name: str, sets, settings, dataset: str, search: bool, per_session: bool, via_turn: str | None) -> Figures:
    """`via_turn`: None to call the extractor in this process, else the memctl.toml text of the
    memories `memctl turn` learns into."""
    figures = Figures()
    started = time.monotonic()
    for set_name, sessions, gold, raw_docs, questions in sets:
        if via_turn is None:
            extracted = run_extractor(settings, sessions, dataset, per_session)
        else:
            extracted = run_memctl_turn(sessions, dataset, via_turn)
        figures.add(extracted, gold, raw_docs)
        if search:
            for system, docs in (("learned", learned_docs(extracted, raw_docs)), ("raw", raw_docs)):
                workdir = Path(tempfile.mkdtemp(prefix="memctl-extract-bench-"))
                try:
                    root = import_memory(docs, workdir) if docs else None
                    ranked = search_memory(root, questions, workdir, K, fusion="none") if root else {}
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                figures.add_recall(system, ranked, questions)
        print(f"  {set_name}: {extracted.turns} turns", file=sys.stderr)
    print(f"{name}: {time.monotonic() - started:.1f}s", file=sys.stderr)
    return figures


# ---------------------------------------------------------------- the scripted model

class ScriptedModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering, for every message, one event that is its text, and
    one candidate naming a message id that is not in the batch."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        shown = json.loads(body["messages"][-1]["content"])["messages"]
        candidates = [{"type": "event", "text": f"{m['speaker'] or 'The user'} said: {m['content']}",
                       "message_ids": [m["id"]]} for m in shown if m["content"]]
        candidates.append({"type": "event", "text": "invented", "message_ids": ["no-such-message"]})
        answer = {"choices": [{"message": {"content": json.dumps({"candidates": candidates})}}]}
        data = json.dumps(answer).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def scripted_endpoint() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def print_table(title: str, figures: Figures) -> None:
    print(f"\n{title}\n\n| figure | value |\n|---|---:|")
    for label, value in figures.rows():
        print(f"| {label} | {value} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--only", choices=("locomo", "memdaily"))
    parser.add_argument("--extractor", choices=("rules", "scripted-model"), default="rules")
    parser.add_argument("--no-search", action="store_true", help="coverage, bytes and time only (no R@10)")
    parser.add_argument("--via-turn", action="store_true",
                        help="feed the sessions through the installed `memctl turn` and `dispose` and read what L5 "
                             "holds (ms per turn then includes two process starts per session)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="memctl-extract-settings-"))
    server = None
    try:
        init_root(scratch)
        if args.extractor == "scripted-model":
            server = scripted_endpoint()
            (scratch / "memctl.toml").write_text(
                f'[extract]\nendpoint = "http://127.0.0.1:{server.server_address[1]}/v1"\nmodel = "scripted"\n',
                encoding="utf-8")
        settings = load_settings(scratch)
        per_session = args.extractor != "rules"
        via_turn = (scratch / "memctl.toml").read_text(encoding="utf-8") if args.via_turn else None
        label = f"{args.extractor}{' via memctl turn' if args.via_turn else ''}"
        if args.only in (None, "locomo"):
            sets = locomo_conversations(args.bench_dir / "locomo" / "locomo_dev.json")
            print_table(f"LoCoMo dev, extractor {label}",
                        evaluate("LoCoMo", sets, settings, "locomo", not args.no_search, per_session, via_turn))
        if args.only in (None, "memdaily"):
            sets = memdaily_pools(args.bench_dir / "memdaily" / "memdaily_dev.json")
            print_table(f"MemDaily dev (pooled), extractor {label}",
                        evaluate("MemDaily", sets, settings, "memdaily", not args.no_search, per_session, via_turn))
    finally:
        if server is not None:
            server.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
