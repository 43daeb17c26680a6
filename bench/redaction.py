#!/usr/bin/env python3
"""Redaction alone, as the index build runs it (one call per document), on the session
documents of a pure-Latin and a pure-Chinese memory of ~8 MB each (bench/search_scale.py's
generator): this checkout's memctl.core.redact beside an older one's redact.py, same texts,
same process, CPU seconds; the outputs must be equal.

    git archive 7a9f7c5 | tar -x -C /tmp/base
    .venv/bin/python bench/redaction.py --baseline /tmp/base/memctl/core/redact.py
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from search_scale import build_memory  # noqa: E402

from memctl.core import redact as current  # noqa: E402
from memctl.recall.indexing.documents import session_docs  # noqa: E402


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location("baseline_redact", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_redact"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="an older memctl/core/redact.py")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-redaction"))
    args = parser.parse_args()
    baseline = load_module(args.baseline)
    for label, share in (("latin", 0.0), ("chinese", 1.0)):
        root = args.workdir / label
        shutil.rmtree(root, ignore_errors=True)
        build_memory(root, 8_000_000, share, seed=11, l5_entries=2000)
        docs = [doc.text for path in sorted((root / "L4_raw_sessions").glob("*.txt")) if path.name != "all_histories.txt"
                for doc in session_docs(path.stem, path.read_text(encoding="utf-8"))]
        size = sum(len(text.encode()) for text in docs)
        timings, outputs = [], []
        for module in (baseline, current):
            started = time.process_time()
            outputs.append([module.redact(text) for text in docs])
            timings.append(time.process_time() - started)
        assert outputs[0] == outputs[1], "the two redactions differ"
        print(f"{label}: {len(docs)} documents, {size / 1e6:.1f} MB: baseline {timings[0]:.2f} cpu-s "
              f"({size / timings[0] / 1e6:.1f} MB/cpu-s), this checkout {timings[1]:.2f} cpu-s "
              f"({size / timings[1] / 1e6:.1f} MB/cpu-s); same output")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
