"""Synthetic GenericAgent raw logs (formats A and B) for tests, benchmarks and the demo.

Shapes follow samples/genericagent/README.md: marker lines, one JSON block a line for format
A prompts, Python-literal response lists, the text protocol with its system prompt, tool
list, `=== USER ===` sections, working-memory anchors with sliding `<history>` windows, and
the empty `=== ASSISTANT ===` echo. Content is random but deterministic for a seed.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

_WORDS_EN = ("backup deploy proxy credential rotation archive nightly worker queue latency index "
             "schema migration rollback replica snapshot token cache cluster bucket upload retry "
             "config service timer journal disk quota alert metric trace release build test").split()
_WORDS_ZH = ("数据 迁移 脚本 回滚 路径 延期 告警 规则 上线 误报 扩容 服务器 备份 日志 凭证 轮换 "
             "缓存 队列 延迟 索引 部署 配置 磁盘 清理 会议 纪要 整理 项目 分组 待办").split()

TOOLS = [
    {"type": "function", "function": {"name": name, "description": desc,
                                      "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
    for name, desc in (("code_run", "Run a python or shell snippet."), ("file_read", "Read a text file."),
                       ("web_scan", "Return simplified HTML of the current tab."), ("file_write", "Write a file."))
]


def marker(label: str, stamp: datetime, model: str = "") -> str:
    return f"=== {label} === {stamp:%Y-%m-%d %H:%M:%S}" + (f" model={model}" if model else "") + "\n"


def entry(label: str, stamp: datetime, body: str, model: str = "") -> str:
    return marker(label, stamp, model) + body + "\n\n"


def anchor(history: list[str], turn: int) -> str:
    text = "\n### [WORKING MEMORY]\n"
    if turn % 2 == 1:
        text += "<history>\n" + "\n".join(history[-30:]) + "\n</history>"
    return text + f"\nCurrent turn: {turn}\n"


def sentence(rng: random.Random, chinese: bool, words: int = 10) -> str:
    pool = _WORDS_ZH if chinese else _WORDS_EN
    joiner = "" if chinese else " "
    return joiner.join(rng.choice(pool) for _ in range(words))


def tool_output(rng: random.Random, size: int, chinese: bool) -> str:
    lines = []
    total = 0
    number = 0
    while total < size:
        number += 1
        line = f"{number}|{sentence(rng, chinese and number % 3 == 0, rng.randint(6, 16))} {rng.randint(0, 99999)}"
        lines.append(line)
        total += len(line.encode()) + 1
    return "\n".join(lines) + "\n"


def system_prompt(rng: random.Random) -> str:
    return ("# Role: hands-on executor (synthetic)\nUse tools to verify; put a one-line <summary> in every reply.\n"
            "cwd = /home/demo/ga/temp (./)\n\n[Memory] (../memory)\n../memory/global_mem_insight.txt:\n"
            "# [Global Memory Insight]\nL2: DEPLOY | PROXY\n[RULES]\n1. verify before asserting\n\n"
            "### Interaction Protocol\n1. Think in <thinking>. 2. One-line <summary>. 3. Emit <tool_use> blocks.\n"
            "### Tools (mounted):\n" + json.dumps(TOOLS, ensure_ascii=False, separators=(",", ":")) + "\n")


def format_a(start: datetime, turns: int, rng: random.Random, output_size: int = 2000, chinese: bool = True,
             request: str | None = None) -> str:
    stamp = start
    ask = request or ("请" + sentence(rng, True, 8) + r"，结果写到 D:\notes\out.md" if chinese else sentence(rng, False, 12))
    history = ["[USER]: " + ask]
    out = [entry("Prompt", stamp, _json_prompt([{"type": "text", "text": ask}]))]
    for turn in range(1, turns + 1):
        stamp += timedelta(seconds=rng.randint(5, 40))
        summary = sentence(rng, chinese, 6)
        tool_id = f"toolu_{turn:04d}"
        out.append(entry("Response", stamp, _literal_response([
            {"type": "thinking", "thinking": f"Step {turn}", "signature": "Ep" + "A" * 40},
            {"type": "text", "text": f"<summary>{summary}</summary>\n继续处理。"},
            {"type": "tool_use", "id": tool_id, "name": "code_run", "input": {"script": f"print({turn})"}}]),
            "claude-sonnet-4-5"))
        history.append("[Agent] " + summary)
        stamp += timedelta(seconds=rng.randint(2, 20))
        out.append(entry("Prompt", stamp, _json_prompt([
            {"type": "tool_result", "tool_use_id": tool_id, "content": tool_output(rng, output_size, chinese)},
            {"type": "text", "text": anchor(history, turn)}])))
    stamp += timedelta(seconds=rng.randint(5, 40))
    out.append(entry("Response", stamp, _literal_response([
        {"type": "text", "text": f"<summary>完成 {sentence(rng, chinese, 4)}</summary>\n已完成。"}]), "claude-sonnet-4-5"))
    return "".join(out)


def _json_prompt(blocks: list[dict]) -> str:
    return '{"role": "user", "content": [\n' + ",\n".join(json.dumps(b, ensure_ascii=False) for b in blocks) + "]}"


def _literal_response(blocks: list[dict]) -> str:
    return "[" + ",\n".join(repr(b) for b in blocks) + "]"


def format_b(start: datetime, turns: int, rng: random.Random, output_size: int = 2000, chinese: bool = False,
             request: str | None = None, tool_text: str | None = None) -> str:
    stamp = start
    ask = request or sentence(rng, chinese, 14)
    history = ["[USER]: " + ask]
    out = [entry("Prompt", stamp, _text_prompt(ask, (), head=system_prompt(rng)))]
    for turn in range(1, turns + 1):
        stamp += timedelta(seconds=rng.randint(5, 40))
        summary = sentence(rng, chinese, 6)
        call = json.dumps({"name": "code_run", "arguments": {"script": f"step {turn}"}}, ensure_ascii=False)
        out.append(entry("Response", stamp, f"<thinking>Turn {turn}</thinking>\n<summary>{summary}</summary>\n"
                                            f"Running the next check.\n<tool_use>{call}</tool_use>", "deepseek-chat"))
        history.append("[Agent] " + summary)
        stamp += timedelta(seconds=rng.randint(2, 20))
        head = system_prompt(rng) if turn % 10 == 0 else "\n### Tools: still active, ready to call. Protocol unchanged.\n"
        result = tool_text if tool_text is not None else tool_output(rng, output_size, chinese)
        out.append(entry("Prompt", stamp, _text_prompt(anchor(history, turn), (result,), head=head)))
    stamp += timedelta(seconds=rng.randint(5, 40))
    out.append(entry("Response", stamp, f"<thinking>done</thinking>\n<summary>Done: {sentence(rng, chinese, 4)}</summary>\n"
                                        "Final answer: all checks passed.", "deepseek-chat"))
    return "".join(out)


def _text_prompt(user_text: str, tool_results, head: str) -> str:
    body = "=== USER ===\n" + "".join(f"<tool_result>{r}</tool_result>\n" for r in tool_results) + user_text + "\n"
    return head + body + "=== ASSISTANT ===\n"


def no_tool_session(start: datetime, question: str, answer: str) -> str:
    """A session that used no tools: one request, one answer without a <summary>."""
    return (entry("Prompt", start, _json_prompt([{"type": "text", "text": question}]))
            + entry("Response", start + timedelta(seconds=9), _literal_response([{"type": "text", "text": answer}]), "m"))
