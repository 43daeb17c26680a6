"""Benchmark of `memctl dream`: time and peak RSS at 10,000 and 100,000 L5 entries, and the
precision of consolidation on planted near-duplicates.

    .venv/bin/python bench/dream.py                 # 10k and 100k
    .venv/bin/python bench/dream.py --sizes 10000   # one size
    .venv/bin/python bench/dream.py --baseline ../base/.venv/bin/memctl   # main's dream too
    .venv/bin/python bench/dream.py --sizes 100000 --writes   # and the remembers around it

`--writes`: one `remember` before the dream (it builds the write lookups, as a memory's usual
writes have), then two after it — the first after a dream against the second, CPU and wall
each (issue #31: the first used to rebuild the lookups and read L5 and L6 whole).

The entries are synthetic but shaped like real ones: mixed Chinese/English sentences with host
names, paths and numbers; 4% of the facts are planted as groups of 3-4 near-duplicates
(case, punctuation, a dropped or added word, swapped words, a typo). Dates spread over 200
days with some references, so archive and forget also have work. The dream runs as the
installed console script in a subprocess (`--force`, so the guard rail does not stop it);
peak RSS is that process's ru_maxrss, and its CPU time (user + system) is printed beside the
wall time (the machine is shared: CPU time is what compares across loads). L5 is written as
it is generated (`generate_s`), so a million entries (`--sizes 1000000`) need no million
dicts in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from itertools import accumulate, combinations
from pathlib import Path
from typing import Iterator

NOW = datetime(2026, 6, 1, 4, 0, 0)
EN = ("deploy build server cache token backup restore script config database index query user agent "
      "session archive memory timeout retry network proxy certificate docker image volume cluster node "
      "pipeline release branch commit review test coverage latency metrics alert dashboard schema "
      "migration replica shard queue worker cron timer log rotate compress upload download mirror "
      "python rust golang java kotlin swift vim emacs helix zsh fish tmux ssh gpg vpn dns http grpc "
      "sqlite postgres redis kafka nginx caddy s3 bucket lambda function budget invoice customer "
      "meeting friday monday deadline roadmap design spec ticket bug crash fix patch upgrade rollback").split()
ZH = ("部署 构建 服务器 缓存 令牌 备份 恢复 脚本 配置 数据库 索引 查询 用户 会话 归档 记忆 超时 重试 网络 代理 "
      "证书 镜像 集群 节点 流水线 发布 分支 提交 评审 测试 覆盖率 延迟 指标 告警 看板 迁移 副本 队列 定时 日志 "
      "压缩 上传 下载 客户 会议 截止 路线图 设计 工单 修复 补丁 升级 回滚 偏好 习惯 项目 团队 文档 周报").split()
GLUE_EN = ["the", "on", "for", "before", "after", "with", "needs", "uses", "must", "should", "always", "never"]
GLUE_ZH = ["的", "在", "需要", "使用", "之前", "之后", "必须", "总是", "不要"]
TYPES = ["event", "case", "lesson", "decision", "lesson", "event"]
_SYL = "ka ro mi te su na lo ve di pa ne shi ta ru ko ba li mo zu fe".split()
_HAN = "数据服务部署缓存用户会话记忆检索索引脚本配置网络代理证书镜像集群节点发布分支提交测试延迟指标告警迁移队列日志压缩客户会议设计修复升级偏好习惯项目团队文档报表权限账号密钥".replace("", " ").split()


def _vocabulary(rng: random.Random) -> tuple[list[str], list[str]]:
    """A long-tailed vocabulary like real notes: the common words above plus invented names
    (projects, people, services) and two-character Chinese words, drawn with Zipf weights."""
    names = {"".join(rng.choice(_SYL) for _ in range(rng.randint(2, 4))) for _ in range(6000)}
    han = {rng.choice(_HAN) + rng.choice(_HAN) for _ in range(3000)}
    return EN + sorted(names), ZH + sorted(han)


def _zipf(words: list[str]) -> list[float]:
    return [1.0 / (rank + 1) ** 0.9 for rank in range(len(words))]


def sentence(rng: random.Random, vocab) -> str:
    (en, en_w), (zh, zh_w) = vocab
    words = []
    for _ in range(rng.randint(6, 14)):
        roll = rng.random()
        if roll < 0.45:
            words.append(rng.choices(en, cum_weights=en_w)[0])
        elif roll < 0.75:
            words.append(rng.choices(zh, cum_weights=zh_w)[0])
        elif roll < 0.9:
            words.append(rng.choice(GLUE_EN + GLUE_ZH))
        else:
            words.append(rng.choice([f"bk-{rng.randint(1, 99):02d}", f"/var/lib/{rng.choice(EN)}",
                                     f"v{rng.randint(1, 9)}.{rng.randint(0, 20)}", f"{rng.randint(2, 500)}ms"]))
    text = " ".join(words)
    return text[0].upper() + text[1:]


def variant(text: str, rng: random.Random) -> str:
    words = text.split()
    kind = rng.randrange(5)
    if kind == 0:
        return text.lower() + rng.choice([".", "!", "。", ""])
    if kind == 1 and len(words) > 6:
        words.pop(rng.randrange(1, len(words)))
        return " ".join(words)
    if kind == 2:
        words.insert(rng.randrange(1, len(words)), rng.choice(["really", "also", "确实", "just"]))
        return " ".join(words)
    if kind == 3 and len(words) > 3:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
        return " ".join(words)
    i = rng.randrange(len(text) - 1)
    if text[i].isalpha() and text[i].isascii():
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text + "。"


def make_entries(n: int, seed: int = 4) -> tuple[list[dict], list[list[str]]]:
    planted: list[list[str]] = []
    return list(iter_entries(n, planted, seed)), planted


def iter_entries(n: int, planted: list[list[str]], seed: int = 4) -> Iterator[dict]:
    """The n entries, one at a time (a million do not fit comfortably in memory as dicts);
    the planted groups whole inside the n are added to `planted`."""
    rng = random.Random(seed)
    made = 0
    en, zh = _vocabulary(rng)
    vocab = ((en, list(accumulate(_zipf(en)))), (zh, list(accumulate(_zipf(zh)))))
    while made < n:
        base = sentence(rng, vocab)
        type_ = rng.choice(TYPES)
        age = rng.random()
        days = rng.uniform(0, 25) if age < 0.9 else rng.uniform(25, 200)
        created = (NOW - timedelta(days=days)).isoformat(timespec="seconds")
        refs = rng.choice([0, 0, 1, 2, 5])
        group = [base]
        if rng.random() < 0.04:
            group += [variant(base, rng) for _ in range(rng.randint(2, 3))]
        ids = [f"b{made + k:07d}" for k in range(len(group))]
        for k, text in enumerate(group):
            if made + k < n:
                yield {"id": ids[k], "text": text, "type": type_, "created": created, "updated": created,
                       "refs": refs, "last_ref": created if refs else "", "source": f"bench-{(made + k) % 97}"}
        made += len(group)
        if len(group) > 1 and made <= n:
            planted.append(ids)


def write_memory(root: Path, n: int) -> list[list[str]]:
    """A memory root with n bench entries in L5, written as they are made; the planted groups."""
    subprocess.run([memctl_bin(), "--root", str(root), "init"], check=True, capture_output=True)
    planted: list[list[str]] = []
    with open(root / "long_term.jsonl", "w", encoding="utf-8") as out:
        for entry in iter_entries(n, planted):
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return planted


def memctl_bin() -> str:
    here = Path(sys.executable).with_name("memctl")
    return str(here) if here.exists() else (shutil.which("memctl") or "memctl")


def measure(n: int, baseline: str | None = None, writes: bool = False) -> list[dict]:
    """One dream of n entries by this tree's `memctl`; with `baseline` (another install's
    `memctl`, e.g. main's), first that one's on a copy of the same memory, in the same run."""
    with tempfile.TemporaryDirectory(prefix="memctl-bench-") as tmp:
        root = Path(tmp) / "memory"
        made = time.perf_counter()
        planted = write_memory(root, n)
        generated = time.perf_counter() - made
        results = []
        if baseline:
            copy = Path(tmp) / "baseline"
            shutil.copytree(root, copy, symlinks=True)
            results.append(dict(_dream(baseline, copy, n, planted, generated, writes), memctl=baseline))
            shutil.rmtree(copy)
        results.append(dict(_dream(memctl_bin(), root, n, planted, generated, writes), memctl=memctl_bin()))
    return results


ENV = {"MEMCTL_NOW": NOW.isoformat(), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "MEMCTL_RESIDENT": "0"}


def _run(binary: str, root: Path, arguments: list[str]) -> tuple[float, object, bytes]:
    """(wall seconds, rusage, stdout) of one memctl process. Each run is its own child
    process, reaped before the next, and RUSAGE_CHILDREN's peak is the largest of any child so
    far: a run whose peak is below an earlier run's would read as that one's, hence os.wait4
    of this process alone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen([binary, "--root", str(root), *arguments], stdout=out, stderr=err, env=ENV)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(err.read().decode())
        return seconds, usage, out.read()


def _remember(binary: str, root: Path, text: str) -> dict:
    seconds, usage, _ = _run(binary, root, ["remember", text, "--type", "event"])
    return {"s": round(seconds, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}


def _quiet_writes(root: Path) -> None:
    """No automatic dream and no background index build started by the bench's remembers."""
    toml = root / "memctl.toml"
    text = toml.read_text().replace("[dream]\n", "[dream]\nauto_trigger_entries = 1000000000\n", 1)
    toml.write_text(text + "\n[index]\nbackground_build_bytes = 1000000000000000\n")


def _dream(binary: str, root: Path, n: int, planted: list[list[str]], generated: float, writes: bool = False) -> dict:
    """Time, CPU and peak RSS of one `memctl dream` process (with `writes`, the remembers
    around it too)."""
    around = {}
    if writes:
        _quiet_writes(root)
        around["remember_before_dream"] = _remember(binary, root, "the bench's fact written before the dream")
    seconds, usage, out = _run(binary, root, ["dream", "--force", "--json"])
    report = json.loads(out)
    if writes:
        around["remember_after_dream_first"] = _remember(binary, root, "the first fact after the dream qq1")
        around["remember_after_dream_second"] = _remember(binary, root, "the second fact after the dream zz2")
    groups = consolidated_groups(root / "dream_log.jsonl")
    precision, recall = score(groups, planted)
    return {**around, "entries": n, "generate_s": round(generated, 1), "seconds": round(seconds, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "longest_lock_hold_s": report.get("longest_step_s"), "steps": report.get("steps"),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "counts": report["counts"], "l5_after": report["l5_after"], "planted_groups": len(planted),
            "consolidations": len(groups), "pair_precision": precision, "planted_recall": recall}


def consolidated_groups(log: Path) -> list[list[str]]:
    groups = []
    with open(log, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("op") == "consolidate":
                groups.append([b["id"] for b in record["before"]])
    return groups


def score(groups: list[list[str]], planted: list[list[str]]) -> tuple[float, float]:
    """Pairwise precision of the consolidations; share of planted groups consolidated whole."""
    truth = {i: k for k, g in enumerate(planted) for i in g}
    pairs = [(a, b) for g in groups for a, b in combinations(sorted(g), 2)]
    good = sum(1 for a, b in pairs if a in truth and truth.get(a) == truth.get(b))
    found = {frozenset(g) for g in groups}
    whole = sum(1 for g in planted if frozenset(g) in found)
    return (round(good / len(pairs), 4) if pairs else 1.0), (round(whole / len(planted), 4) if planted else 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--baseline", metavar="MEMCTL",
                        help="another install's memctl (e.g. main's) to dream first on a copy of each memory")
    parser.add_argument("--writes", action="store_true",
                        help="a remember before the dream, two after it (the first after a dream against the second)")
    args = parser.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        for result in measure(n, args.baseline, args.writes):
            print(json.dumps(result, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
