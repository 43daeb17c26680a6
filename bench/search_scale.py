#!/usr/bin/env python3
"""How `memctl search` scales: index build, incremental refresh and query latency on a
synthetic memory of mixed Chinese and English history, beside ripgrep and a Python scan.

For each size (default 100 MB, then 1 GB) it writes a memory folder with compressed session
files (loose, in the compressed-session text format), an all_histories.txt, and 100,000 L5
entries, then prints:

- full index build (`memctl index rebuild` as a process): seconds, MB/s wall and per CPU-second,
  the load average, and beside it the floor: the same rows, with memctl's own tokens, inserted
  into a bare SQLite FTS5 table in one transaction; the same on pure-Chinese and pure-Latin
  samples measured separately (`--build-only`: these builds only, no queries);
- incremental refresh after one new session, English and Chinese, as a process (`memctl index
  refresh`) and in-process;
- p50/p95 wall time of `memctl search` as a whole process over 50 queries (25 zh, 25 en),
  piped as an agent or a script runs it, with its CPU time (user + system: what other load on
  the machine changes least) and peak RSS, and the in-process query time (index already open);
- the same queries with `rg -i -c` and with a plain Python scan of the same files;
- how each p50 grows from the smallest size to the largest. Every size is built first, then
  each query runs against every size in turn, so that load from elsewhere on a shared machine
  weighs on all sizes alike.

    .venv/bin/python bench/search_scale.py [--sizes 100M,1G] [--workdir /tmp/memctl-scale] [--semantic]

--semantic (needs the `[semantic]` extra: `pip install -e '.[semantic]'`): after the build, `memctl index embed` is
timed (seconds per MB of history text, peak RSS), and the searches run twice: lexical only
(`[ranking] fusion = "none"` in the memory's memctl.toml) and fused (the defaults). The
embedding runs at a few hundred items a second at best on 2 CPU cores: start small
(`--sizes 20M --l5-entries 5000`); a 1 GB memory takes hours.

--semantic --embed-for DURATION (e.g. 12m; with --reuse of a built memory): a memory too large to
embed here, measured in four steps (bench/search_scale_semantic.py): (a) lexical only, (b) one
`memctl index embed --for DURATION` (CPU-s per MB embedded, texts per CPU-s, the whole memory
projected), (c) fused search on that partial store, (d) fused search on a synthetic store with a
random vector for every row, written by memctl's own pass (timing only, not recall); `--model`
names the [semantic] model (default multilingual-e5-small), `--embed-for 0` skips (b).

    nice -n 10 .venv/bin/python bench/search_scale.py --sizes 1G --workdir /tmp/sem1g --reuse \
        --semantic --embed-for 12m --no-rates --python-scan-queries 2

Needs ripgrep (`apt-get install ripgrep`). The 1 GB build takes a long time on a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

EN_WORDS = """
deploy server cluster kubernetes ingress certificate rotate password vault grafana dashboard alert
database postgres migration schema index query latency cache redis queue worker retry timeout
network firewall proxy nginx config build release pipeline canary rollback test coverage bug fix
patch review merge branch commit tag docker image registry storage backup restore snapshot volume
token secret account user login session cookie header request response error warning log metric
trace span profile memory cpu disk usage quota limit budget invoice customer order payment refund
report meeting schedule calendar travel flight hotel dinner friend family birthday gift garden
recipe coffee tea music guitar painting photo camera hiking running swimming book novel movie
""".split()
ZH_WORDS = """
部署 服务器 集群 证书 密码 数据库 迁移 索引 查询 延迟 缓存 队列 超时 网络 防火墙 代理 配置 发布
流水线 回滚 测试 覆盖率 修复 补丁 合并 分支 提交 镜像 仓库 存储 备份 恢复 快照 账户 用户 登录
会话 请求 响应 错误 警告 日志 指标 内存 磁盘 配额 预算 发票 客户 订单 支付 退款 报告 会议 日程
出差 航班 酒店 晚餐 朋友 家人 生日 礼物 花园 菜谱 咖啡 茶叶 音乐 吉他 绘画 照片 相机 徒步 跑步
游泳 小说 电影 上司 同事 表妹 学历 毕业 深圳 北京 上海 杭州 成都 重庆 天气 周末 计划 项目 需求
""".split()
SYLLABLES = "ka lo mi nu pe ra si to vu xe zo qua bri dro fle gri plo stu tra ven".split()
ZH_CHARS = "天地人和风云山水火木金土日月星光明春夏秋冬东南西北中心手口目耳大小多少高低长短新旧快慢好坏开关"


def rare_words(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) + str(rng.randint(0, 99))
            for _ in range(count)]


def rare_zh_words(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choice(ZH_CHARS) for _ in range(rng.randint(2, 3))) for _ in range(count)]


class TextMaker:
    """Zipf-ish English and Chinese sentences with a long tail of rare words."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.en_rare = rare_words(self.rng, 20000)
        self.zh_rare = rare_zh_words(self.rng, 5000)

    def en_sentence(self) -> str:
        rng = self.rng
        words = [rng.choice(EN_WORDS) if rng.random() < 0.85 else rng.choice(self.en_rare)
                 for _ in range(rng.randint(6, 16))]
        return " ".join(words).capitalize() + "."

    def zh_sentence(self) -> str:
        rng = self.rng
        words = [rng.choice(ZH_WORDS) if rng.random() < 0.85 else rng.choice(self.zh_rare)
                 for _ in range(rng.randint(5, 12))]
        return "".join(words) + "。"

    def paragraph(self, zh_share: float, sentences: int) -> str:
        return " ".join(self.zh_sentence() if self.rng.random() < zh_share else self.en_sentence()
                        for _ in range(sentences))


def session_text(maker: TextMaker, start: float, zh_share: float, entries: int) -> str:
    lines = ["⟪memctl-session v1 source=synthetic⟫"]
    stamp = start
    for number in range(entries):
        kind = "Prompt" if number % 2 == 0 else "Response === {t} model=m"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
        lines.append(f"=== Prompt === {when}" if kind == "Prompt" else f"=== Response === {when} model=m")
        for _ in range(maker.rng.randint(2, 8)):
            lines.append(maker.paragraph(zh_share, maker.rng.randint(1, 5)))
        lines.append("")
        stamp += maker.rng.randint(5, 120)
    return "\n".join(lines) + "\n"


def session_name(start: float, end: float, taken: set[str]) -> str:
    base = time.strftime("%m%d_%H%M", time.gmtime(start)) + "-" + time.strftime("%m%d_%H%M", time.gmtime(end))
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def build_memory(root: Path, total_bytes: int, zh_share: float, seed: int = 7, l5_entries: int = 100_000) -> dict:
    """Write a memory folder of about total_bytes of history text; returns byte counts."""
    maker = TextMaker(seed)
    l4 = root / "L4_raw_sessions"
    (root / ".memctl").mkdir(parents=True, exist_ok=True)
    l4.mkdir(parents=True, exist_ok=True)
    counts = {"sessions": 0, "session_bytes": 0, "history_bytes": 0, "l5_bytes": 0}
    with open(root / "long_term.jsonl", "w", encoding="utf-8") as handle:
        for i in range(l5_entries):
            text = maker.paragraph(zh_share, maker.rng.randint(1, 2))
            line = json.dumps({"id": f"m{i:06d}", "type": "event", "text": text,
                               "created": "2026-01-01T00:00:00"}, ensure_ascii=False) + "\n"
            handle.write(line)
            counts["l5_bytes"] += len(line.encode())
    taken: set[str] = set()
    stamp = time.mktime((2025, 1, 1, 0, 0, 0, 0, 0, 0))
    with open(l4 / "all_histories.txt", "w", encoding="utf-8") as history:
        while counts["session_bytes"] + counts["history_bytes"] + counts["l5_bytes"] < total_bytes:
            text = session_text(maker, stamp, zh_share, maker.rng.randint(20, 80))
            end = stamp + 3600
            name = session_name(stamp, end, taken)
            (l4 / f"{name}.txt").write_text(text, encoding="utf-8")
            block = ["", "=" * 60, f"SESSION: {name}", "=" * 60]
            for _ in range(maker.rng.randint(10, 30)):
                speaker = "[USER]: " if maker.rng.random() < 0.5 else "[Agent] "
                block.append(speaker + maker.paragraph(zh_share, 1))
            chunk = "\n".join(block) + "\n"
            history.write(chunk)
            counts["sessions"] += 1
            counts["session_bytes"] += len(text.encode())
            counts["history_bytes"] += len(chunk.encode())
            stamp += maker.rng.randint(3600, 6 * 3600)
    return counts


def make_queries(seed: int) -> tuple[list[str], list[str]]:
    maker = TextMaker(seed)  # same rare words as the corpus
    rng = random.Random(seed + 1)
    en, zh = [], []
    for i in range(25):
        shape = i % 5
        if shape == 0:
            en.append(rng.choice(maker.en_rare))
        elif shape == 1:
            en.append(f"{rng.choice(EN_WORDS)} {rng.choice(maker.en_rare)}")
        elif shape == 2:
            en.append(" ".join(rng.sample(EN_WORDS, 3)))
        elif shape == 3:
            en.append(f"how did we {rng.choice(EN_WORDS)} the {rng.choice(EN_WORDS)} {rng.choice(EN_WORDS)}")
        else:
            en.append(f"{rng.choice(maker.en_rare)} {rng.choice(maker.en_rare)}")
    for i in range(25):
        shape = i % 5
        if shape == 0:
            zh.append(rng.choice(maker.zh_rare))
        elif shape == 1:
            zh.append(rng.choice(ZH_WORDS) + rng.choice(maker.zh_rare))
        elif shape == 2:
            zh.append("".join(rng.sample(ZH_WORDS, 3)))
        elif shape == 3:
            zh.append(f"上次{rng.choice(ZH_WORDS)}的{rng.choice(ZH_WORDS)}是怎么处理的")
        else:
            zh.append(f"{rng.choice(ZH_WORDS)} {rng.choice(EN_WORDS)} 问题")
    return en, zh


# ---------------------------------------------------------------- measuring

def memctl_exe() -> str:
    beside = Path(sys.executable).with_name("memctl")
    return str(beside) if beside.exists() else shutil.which("memctl") or sys.exit("memctl is not installed")


def timed_process(cmd: list[str], env: dict | None = None) -> tuple[float, int, int, bytes]:
    """(seconds, exit code, peak RSS in KB, stdout) of one process."""
    elapsed, code, rss, out, _ = timed_process_cpu(cmd, env)
    return elapsed, code, rss, out


def timed_process_cpu(cmd: list[str], env: dict | None = None) -> tuple[float, int, int, bytes, float]:
    """Also the process's CPU seconds (user + system): unlike the wall time, hardly changed by
    other work sharing the machine's cores."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, proc.returncode, usage.ru_maxrss, out, usage.ru_utime + usage.ru_stime


def child_env() -> dict[str, str]:
    """The environment of every timed process: no MEMCTL_ overrides, and bytecode caching on
    (an installed package runs from its .pyc files; with PYTHONDONTWRITEBYTECODE set, every
    process would recompile memctl's modules, ~100 ms)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"NO_COLOR": "1", "LANG": "C.UTF-8"})
    import memctl

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(memctl.__file__).parent)],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    return env


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def history_files(root: Path) -> list[Path]:
    l4 = root / "L4_raw_sessions"
    return [p for p in l4.iterdir() if p.suffix == ".txt"] + [root / "long_term.jsonl"]


def python_scan(files: list[Path], query: str) -> int:
    """The reference's approach: read every file and look for the query in each line."""
    needle = query.lower()
    hits = 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if needle in line.lower():
                    hits += 1
    return hits


def load_average() -> float:
    return os.getloadavg()[0]


def fts5_floor_seconds(index_path: Path, workdir: Path) -> float:
    """Seconds to insert the index's rows, with memctl's own tokens, into a bare SQLite FTS5
    table in one transaction: what the index structure costs, the floor of a build."""
    import sqlite3

    from memctl.recall.indexing.store import FTS_TOKENIZE

    source = sqlite3.connect(index_path)
    rows = source.execute("SELECT rowid, body FROM fts").fetchall()
    source.close()
    floor_path = workdir / "fts5-floor.sqlite"
    floor_path.unlink(missing_ok=True)
    db = sqlite3.connect(floor_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(body, tokenize=\"{FTS_TOKENIZE}\")")
    started = time.perf_counter()
    db.execute("BEGIN")
    db.executemany("INSERT INTO fts(rowid, body) VALUES(?, ?)", rows)
    db.execute("COMMIT")
    elapsed = time.perf_counter() - started
    db.close()
    floor_path.unlink()
    return elapsed


def in_child(function, *args, **kwargs):
    """function(*args, **kwargs) in a forked child, its result returned. What it allocates never
    grows this process: Linux reports the peak RSS of the memory a process was started from as
    that process's own ru_maxrss, so every `memctl search` timed after an in-process FTS5 floor
    over 1 GB (3.2 GB here) was reported at 3.2 GB, against 21 MB measured alone."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(function, args, kwargs)


def timed_build(root: Path, exe: str, env: dict, size: int, workdir: Path) -> dict:
    """`memctl index rebuild` as a process (wall, CPU, RSS, load average), and the FTS5 floor."""
    load_before = load_average()
    seconds, code, rss, _, cpu = timed_process_cpu([exe, "--root", str(root), "index", "rebuild"], env)
    assert code == 0, f"index rebuild failed in {root}"
    load = (load_before + load_average()) / 2
    floor = in_child(fts5_floor_seconds, root / ".memctl" / "index.sqlite", workdir)
    return {"build_seconds": seconds, "build_mb_s": size / seconds / 1e6, "build_cpu_s": cpu,
            "build_mb_cpu_s": size / cpu / 1e6, "build_rss_mb": rss / 1024, "build_load": load,
            "floor_seconds": floor, "floor_mb_s": size / floor / 1e6, "floor_load": load_average()}


def measure_build_rates(workdir: Path, exe: str, env: dict, sample_bytes: int = 8_000_000) -> dict[str, dict]:
    """Index build on a pure-Chinese and a pure-Latin memory of ~8 MB each, beside the floor."""
    rates = {}
    for label, share in (("chinese", 1.0), ("latin", 0.0)):
        root = workdir / f"rate-{label}"
        shutil.rmtree(root, ignore_errors=True)
        counts = build_memory(root, sample_bytes, share, seed=11, l5_entries=2000)
        size = counts["session_bytes"] + counts["history_bytes"] + counts["l5_bytes"]
        rates[label] = {"bytes": size, **timed_build(root, exe, env, size, workdir)}
        shutil.rmtree(root, ignore_errors=True)
    return rates


def print_rates(rates: dict[str, dict]) -> None:
    print("\nindex build on pure samples (memctl index rebuild as a process; FTS5 floor = the same rows "
          "with memctl's tokens into a bare FTS5 table, one transaction):")
    for label, r in rates.items():
        if not r:
            continue
        print(f"  {label:<8} {r['bytes'] / 1e6:.1f} MB: build {r['build_seconds']:.2f} s = {r['build_mb_s']:.2f} MB/s wall, "
              f"{r['build_mb_cpu_s']:.2f} MB/cpu-s ({r['build_cpu_s']:.2f} cpu-s, load {r['build_load']:.1f}); "
              f"floor {r['floor_mb_s']:.1f} MB/s wall (load {r['floor_load']:.1f})")


# the new sessions of the refresh measurement (dated 2027, after every generated session)
ADDED_SESSIONS = {"en": "0101_0000-0101_0001.txt", "zh": "0101_0200-0101_0201.txt",
                  "in-process": "0201_0000-0201_0001.txt"}


def prepare_size(label: str, total: int, workdir: Path, zh_share: float, exe: str, env: dict,
                 reuse: bool = False, l5_entries: int = 100_000) -> tuple[Path, dict]:
    """The memory folder and its index (built, or reused with --reuse), and the refresh timings."""
    root = workdir / f"memory-{label}"
    built = root / ".memctl" / "bench-build.json"
    if reuse and (built.is_file() or (root / ".memctl" / "index.sqlite").is_file()):
        print(f"[{label}] reusing the memory folder and index", file=sys.stderr)
        result = json.loads(built.read_text()) if built.is_file() else counted_memory(label, root)
        result["reused"] = True
        for name in ADDED_SESSIONS.values():  # the refresh measurement's sessions, from the earlier run
            (root / "L4_raw_sessions" / name).unlink(missing_ok=True)
    else:
        result = build_and_index(label, total, root, zh_share, exe, env, l5_entries)
        built.write_text(json.dumps(result))

    from memctl.core.config import Layout
    from memctl.recall.indexing.index import SearchIndex

    maker = TextMaker(99)
    for lang, share in (("en", 0.0), ("zh", 1.0)):
        stamp = time.mktime((2027, 1, 1, 0, 0, 0, 0, 0, 0)) + (0 if lang == "en" else 7200)
        (root / "L4_raw_sessions" / ADDED_SESSIONS[lang]).write_text(session_text(maker, stamp, share, 30),
                                                                      encoding="utf-8")
        seconds, code, _, _ = timed_process([exe, "--root", str(root), "index", "refresh"], env)
        result[f"refresh_{lang}_process_s"] = seconds
    maker_session = session_text(maker, time.mktime((2027, 2, 1, 0, 0, 0, 0, 0, 0)), 0.0, 30)
    (root / "L4_raw_sessions" / ADDED_SESSIONS["in-process"]).write_text(maker_session, encoding="utf-8")
    started = time.perf_counter()
    SearchIndex(Layout(root)).ensure_fresh(wait=True)
    result["refresh_en_in_process_s"] = time.perf_counter() - started
    return root, result


def counted_memory(label: str, root: Path) -> dict:
    """A built memory's counts, for --reuse of a folder built without its record (no build numbers)."""
    l4 = root / "L4_raw_sessions"
    sessions = [p for p in l4.iterdir() if p.suffix == ".txt" and p.name != "all_histories.txt"
                and p.name not in ADDED_SESSIONS.values()]
    counts = {"sessions": len(sessions), "session_bytes": sum(p.stat().st_size for p in sessions),
              "history_bytes": (l4 / "all_histories.txt").stat().st_size,
              "l5_bytes": (root / "long_term.jsonl").stat().st_size}
    return {"size": label, "bytes": counts["session_bytes"] + counts["history_bytes"] + counts["l5_bytes"],
            **counts, "index_mb": (root / ".memctl" / "index.sqlite").stat().st_size / 1e6}


def embed_size(root: Path, result: dict, exe: str, env: dict) -> None:
    """`memctl index embed` as a process: the embeddings' own build cost, apart from the index's."""
    print(f"[{result['size']}] embedding the items…", file=sys.stderr)
    seconds, code, rss, out = timed_process([exe, "--root", str(root), "index", "embed", "--json"], env)
    assert code == 0, "memctl index embed failed (is the [semantic] extra installed?)"
    report = json.loads(out)
    result.update(embed_seconds=seconds, embed_rss_mb=rss / 1024, embed_rows=report["rows"],
                  embed_s_per_mb=seconds / (result["bytes"] / 1e6), embed_items_s=report["embedded"] / seconds)


def set_fusion(sizes: list[tuple[Path, dict]], fusion: str | None) -> None:
    for root, _ in sizes:
        config = root / "memctl.toml"
        if fusion is None:
            config.unlink(missing_ok=True)
        else:
            config.write_text(f'[ranking]\nfusion = "{fusion}"\n', encoding="utf-8")


def time_search_processes(sizes: list[tuple[Path, dict]], exe: str, env: dict, prefix: str = "") -> None:
    """`memctl search` as a process, each query run against every size in turn: a change in the
    machine's load during the run then weighs on all sizes alike, not on the one being timed."""
    en, zh = make_queries(7)
    for lang, queries in (("en", en), ("zh", zh)):
        samples = [([], [], [0], [0]) for _ in sizes]  # walls, cpus, peak RSS, queries found
        for query in queries:
            for (root, _), (walls, cpus, rss_peak, hits) in zip(sizes, samples):
                seconds, code, rss, _, cpu = timed_process_cpu([exe, "--root", str(root), "search", query], env)
                walls.append(seconds)
                cpus.append(cpu)
                rss_peak[0] = max(rss_peak[0], rss)
                hits[0] += code == 0
        for (_, result), (walls, cpus, rss_peak, hits) in zip(sizes, samples):
            result[f"{prefix}e2e_{lang}_p50_ms"] = pct(walls, 0.5) * 1000
            result[f"{prefix}e2e_{lang}_p95_ms"] = pct(walls, 0.95) * 1000
            result[f"{prefix}e2e_{lang}_cpu_p50_ms"] = pct(cpus, 0.5) * 1000
            result[f"{prefix}e2e_{lang}_rss_mb"] = rss_peak[0] / 1024
            result[f"{prefix}e2e_{lang}_found"] = hits[0]


def in_process_times(root: Path, queries: list[str], warm: bool = False) -> list[float]:
    """Each query's time with the index open (`warm`: one query first, which loads the model)."""
    from memctl.core.config import Layout
    from memctl.recall.search import SearchRequest, Searcher

    searcher = Searcher(Layout(root), refresh=False)
    if warm:
        searcher.search(SearchRequest(queries[0]))
    times = []
    for query in queries:
        started = time.perf_counter()
        searcher.search(SearchRequest(query))
        times.append(time.perf_counter() - started)
    searcher.close()
    return times


def time_in_process_fused(root: Path, result: dict) -> None:
    """In-process query time with the item vectors fused (the model loaded before the timing)."""
    en, zh = make_queries(7)
    for lang, queries in (("en", en), ("zh", zh)):
        times = in_process_times(root, queries, warm=True)
        result[f"sem_inproc_{lang}_p50_ms"] = pct(times, 0.5) * 1000
        result[f"sem_inproc_{lang}_p95_ms"] = pct(times, 0.95) * 1000


def time_in_process_and_baselines(root: Path, result: dict, python_scan_queries: int) -> None:
    en, zh = make_queries(7)
    for lang, queries in (("en", en), ("zh", zh)):
        inproc = in_process_times(root, queries)
        result[f"inproc_{lang}_p50_ms"] = pct(inproc, 0.5) * 1000
        result[f"inproc_{lang}_p95_ms"] = pct(inproc, 0.95) * 1000

        if shutil.which("rg"):
            rg = [timed_process(["rg", "-i", "-c", query, str(root / "L4_raw_sessions"),
                                 str(root / "long_term.jsonl")])[0] for query in queries]
            result[f"rg_{lang}_p50_ms"] = pct(rg, 0.5) * 1000
            result[f"rg_{lang}_p95_ms"] = pct(rg, 0.95) * 1000
        files = history_files(root)
        scans = []
        for query in queries[:python_scan_queries]:
            started = time.perf_counter()
            python_scan(files, query)
            scans.append(time.perf_counter() - started)
        if scans:  # --python-scan-queries 0: none timed
            result[f"pyscan_{lang}_p50_ms"] = pct(scans, 0.5) * 1000


def build_and_index(label: str, total: int, root: Path, zh_share: float, exe: str, env: dict,
                    l5_entries: int = 100_000) -> dict:
    shutil.rmtree(root, ignore_errors=True)
    print(f"[{label}] writing the memory folder…", file=sys.stderr)
    counts = in_child(build_memory, root, total, zh_share, l5_entries=l5_entries)
    size = counts["session_bytes"] + counts["history_bytes"] + counts["l5_bytes"]
    result: dict = {"size": label, "bytes": size, **counts}
    print(f"[{label}] building the index…", file=sys.stderr)
    result.update(timed_build(root, exe, env, size, root.parent))
    result["index_mb"] = (root / ".memctl" / "index.sqlite").stat().st_size / 1e6
    return result


def print_build(r: dict) -> None:
    print(f"full build: {r['build_seconds']:.1f} s = {r['build_mb_s']:.2f} MB/s wall, {r['build_mb_cpu_s']:.2f} MB/cpu-s "
          f"(peak RSS {r['build_rss_mb']:.0f} MB, load {r['build_load']:.1f}); FTS5 floor {r['floor_seconds']:.1f} s = "
          f"{r['floor_mb_s']:.1f} MB/s (load {r['floor_load']:.1f})")


def print_report(results: list[dict]) -> None:
    for r in results:
        print(f"\n== {r['size']}: {r['bytes'] / 1e6:.0f} MB of history text ({r['sessions']} sessions, "
              f"histories {r['history_bytes'] / 1e6:.0f} MB, L5 {r['l5_bytes'] / 1e6:.0f} MB); "
              f"index {r['index_mb']:.0f} MB")
        if "build_seconds" in r:
            print_build(r)
        print(f"refresh after one new session: English {r['refresh_en_process_s']:.2f} s as a process "
              f"({r['refresh_en_in_process_s']:.2f} s in-process), Chinese {r['refresh_zh_process_s']:.2f} s "
              f"(cut against the index's vocabulary, no jieba)")
        if r.get("reused"):
            print("(memory folder and index reused from an earlier run: build numbers are that run's)")
        if "embed_seconds" in r:
            print(f"embeddings (memctl index embed): {r['embed_rows']} items in {r['embed_seconds']:.1f} s = "
                  f"{r['embed_s_per_mb']:.1f} s per MB of history text, {r['embed_items_s']:.0f} items/s "
                  f"(peak RSS {r['embed_rss_mb']:.0f} MB)")
        print(f"{'queries':<9}{'memctl p50':>12}{'p95':>8}{'CPU p50':>9}{'in-proc p50':>13}{'p95':>8}"
              f"{'RSS MB':>8}{'rg p50':>9}{'p95':>8}{'py scan p50':>13}")
        for lang in ("en", "zh"):
            print(f"{lang:<9}{r[f'e2e_{lang}_p50_ms']:>10.0f}ms{r[f'e2e_{lang}_p95_ms']:>6.0f}ms"
                  f"{r.get(f'e2e_{lang}_cpu_p50_ms', float('nan')):>7.0f}ms"
                  f"{r[f'inproc_{lang}_p50_ms']:>11.1f}ms{r[f'inproc_{lang}_p95_ms']:>6.1f}ms"
                  f"{r[f'e2e_{lang}_rss_mb']:>8.0f}"
                  f"{r.get(f'rg_{lang}_p50_ms', float('nan')):>7.0f}ms{r.get(f'rg_{lang}_p95_ms', float('nan')):>6.0f}ms"
                  f"{r.get(f'pyscan_{lang}_p50_ms', float('nan')):>11.0f}ms")
        for lang in ("en", "zh"):
            if f"sem_e2e_{lang}_p50_ms" in r:
                print(f"{lang + '+sem':<9}{r[f'sem_e2e_{lang}_p50_ms']:>10.0f}ms{r[f'sem_e2e_{lang}_p95_ms']:>6.0f}ms"
                      f"{r[f'sem_e2e_{lang}_cpu_p50_ms']:>7.0f}ms"
                      f"{r[f'sem_inproc_{lang}_p50_ms']:>11.1f}ms{r[f'sem_inproc_{lang}_p95_ms']:>6.1f}ms"
                      f"{r[f'sem_e2e_{lang}_rss_mb']:>8.0f}   (fused; the rows above: lexical only)")


def print_growth(results: list[dict]) -> None:
    """How each cost grows from the smallest size to the largest (flat = 1.0)."""
    if len(results) < 2:
        return
    small, large = results[0], results[-1]
    print(f"\ngrowth {small['size']} -> {large['size']} (x{large['bytes'] / small['bytes']:.1f} data), p50 ratios:")
    for lang in ("en", "zh"):
        parts = []
        for name, key in (("memctl", "e2e_{}_p50_ms"), ("memctl CPU", "e2e_{}_cpu_p50_ms"),
                          ("in-proc", "inproc_{}_p50_ms"), ("rg", "rg_{}_p50_ms"), ("py scan", "pyscan_{}_p50_ms")):
            a, b = small.get(key.format(lang)), large.get(key.format(lang))
            if a and b:
                parts.append(f"{name} {b / a:.2f}x")
        print(f"  {lang}: " + ", ".join(parts))


def builds_only(args, exe: str, env: dict) -> None:
    """The pure samples, then each size: this memctl, then the baseline's on the same data."""
    exes = [("this build", exe)] + ([("baseline", args.baseline)] if args.baseline else [])
    for name, program in exes:
        if not args.no_rates:
            print(f"\n[{name}: {program}]")
            print_rates(measure_build_rates(args.workdir, program, env, parse_size(args.rate_size)))
    for size in filter(None, args.sizes.split(",")):
        root = args.workdir / f"memory-{size}"
        result = build_and_index(size, parse_size(size), root, args.zh_share, exe, env)
        print(f"\n== {size}: {result['bytes'] / 1e6:.0f} MB of history text ({result['sessions']} sessions)")
        print_build(result)
        print(json.dumps(result), file=sys.stderr)
        if args.baseline:
            size_bytes = result["bytes"]
            baseline = timed_build(root, args.baseline, env, size_bytes, args.workdir)
            print("baseline ", end="")
            print_build(baseline)
            print(json.dumps(baseline), file=sys.stderr)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def parse_size(text: str) -> int:
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100M,1G")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-scale"))
    parser.add_argument("--zh-share", type=float, default=0.25, help="share of sentences in Chinese")
    parser.add_argument("--python-scan-queries", type=int, default=5, help="queries timed with the Python scan")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-rates", action="store_true", help="skip the pure-Chinese / pure-Latin build rates")
    parser.add_argument("--semantic", action="store_true",
                        help="also embed the items ([semantic] extra) and time the fused searches beside lexical-only")
    parser.add_argument("--l5-entries", type=int, default=100_000, help="L5 entries in each memory")
    parser.add_argument("--rate-size", default="8M", help="size of each pure-Chinese / pure-Latin sample")
    parser.add_argument("--baseline", metavar="EXE",
                        help="with --build-only: also time this memctl executable (an older commit) on the same data")
    parser.add_argument("--build-only", action="store_true",
                        help="time the builds only (the pure samples, then each size), no queries")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep from an earlier run: reuse its memory folder and index, time the queries only")
    parser.add_argument("--embed-for", metavar="DURATION",
                        help="with --semantic: one bounded `memctl index embed --for DURATION`, then fused search on "
                             "that partial store and on a synthetic full one (bench/search_scale_semantic.py)")
    parser.add_argument("--model", default="multilingual-e5-small", help="with --embed-for: [semantic] model")
    parser.add_argument("--no-synthetic", action="store_true", help="with --embed-for: skip step (d)")
    parser.add_argument("--keep-synthetic", action="store_true",
                        help="with --embed-for: keep the synthetic store (.memctl/vectors-synthetic.sqlite) for "
                             "the next run, which reuses it instead of writing it again")
    args = parser.parse_args()
    if not shutil.which("rg"):
        print("ripgrep not found: install it (apt-get install ripgrep) for the comparison", file=sys.stderr)
    args.workdir.mkdir(parents=True, exist_ok=True)
    exe = memctl_exe()
    env = child_env()
    if args.build_only:
        builds_only(args, exe, env)
        return
    if args.semantic and args.embed_for and args.reuse:  # the refresh timings are the index's, not the vectors'
        for size in args.sizes.split(","):
            if (args.workdir / f"memory-{size}").is_dir():
                (args.workdir / f"memory-{size}" / "memctl.toml").write_text("[semantic]\nenabled = false\n")
    rates = {} if args.no_rates else measure_build_rates(args.workdir, exe, env, parse_size(args.rate_size))
    print_rates(rates)
    sizes = [prepare_size(size, parse_size(size), args.workdir, args.zh_share, exe, env, reuse=args.reuse,
                          l5_entries=args.l5_entries) for size in args.sizes.split(",")]
    if args.semantic and args.embed_for:
        import search_scale_semantic

        for root, result in sizes:
            search_scale_semantic.run(args, root, result, exe, env, sys.modules[__name__])
        return
    if args.semantic:
        for root, result in sizes:
            embed_size(root, result, exe, env)
        set_fusion(sizes, "none")  # first lexical only, on the same memories
    time_search_processes(sizes, exe, env)
    for root, result in sizes:
        time_in_process_and_baselines(root, result, args.python_scan_queries)
    if args.semantic:
        set_fusion(sizes, None)
        time_search_processes(sizes, exe, env, prefix="sem_")
        for root, result in sizes:
            time_in_process_fused(root, result)
    for _, result in sizes:
        print(json.dumps(result), file=sys.stderr)
    results = [result for _, result in sizes]
    print_report(results)
    print_growth(results)
    if not (args.keep or args.reuse):
        for root, _ in sizes:
            shutil.rmtree(root, ignore_errors=True)

if __name__ == "__main__":
    main()
