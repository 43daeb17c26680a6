"""History lines follow GenericAgent's shortening rules and come from the primary sources."""

from __future__ import annotations

import io
import random
from datetime import datetime

from memctl.l4 import loggen
from memctl.l4.history import HistoryBuilder, agent_line, history_block, iter_history_blocks, user_line
from memctl.l4.logs import RawEntry, iter_log


def _lines(text: str) -> list[str]:
    builder = HistoryBuilder()
    for item in iter_log(io.BytesIO(text.encode())):
        if isinstance(item, RawEntry):
            builder.feed(item)
    return builder.result()


def test_user_and_agent_lines_are_cut_like_genericagent():
    request = "a" * 120 + "\n" + "b" * 120
    line = user_line(request)
    assert line == "[USER]: " + "a" * 100 + " ... " + "b" * 100
    assert user_line("x" * 209) == "[USER]: " + "x" * 209
    assert agent_line("s" * 89) == "[Agent] " + "s" * 89
    assert agent_line("s" * 50 + "t" * 40) == "[Agent] " + "s" * 40 + " ... " + "t" * 40
    assert user_line("line one\nline two") == "[USER]: line one line two"


def test_every_summary_and_request_in_order_for_both_formats():
    for maker in (loggen.format_a, loggen.format_b):
        text = maker(datetime(2026, 4, 5, 9, 0), 4, random.Random(2), 100, request="do the thing")
        lines = _lines(text)
        assert lines[0] == "[USER]: do the thing"
        assert len(lines) == 6 and all(line.startswith("[Agent] ") for line in lines[1:])


def test_a_request_typed_mid_task_is_kept():
    first = loggen.format_a(datetime(2026, 4, 5, 9, 0), 1, random.Random(3), 50, request="first ask")
    second = loggen.no_tool_session(datetime(2026, 4, 5, 9, 30), "second ask", "<summary>answered</summary> ok")
    assert _lines(first + second)[-2:] == ["[USER]: second ask", "[Agent] answered"]


def test_secrets_never_reach_history():
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    lines = _lines(loggen.no_tool_session(datetime(2026, 4, 5, 9, 0), f"use token {token}", "done"))
    assert token not in "\n".join(lines) and "REDACTED" in lines[0]


def test_history_blocks_read_back(tmp_path):
    path = tmp_path / "all_histories.txt"
    path.write_text(history_block("0405_0902-0405_0909", ["[USER]: a", "[Agent] b"])
                    + history_block("0406_1000-0406_1001", ["[USER]: c"]), encoding="utf-8")
    assert list(iter_history_blocks(path)) == [("0405_0902-0405_0909", ["[USER]: a", "[Agent] b"]),
                                                ("0406_1000-0406_1001", ["[USER]: c"])]
