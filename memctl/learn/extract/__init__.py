"""Extraction: a batch of a session's messages in, typed candidate memories out (design.md §9a).

`extract_candidates(settings, messages)` is the one entry point the write link calls. By
default the rules of `deterministic` (English and Chinese, no model) read the messages; with
`[extract] command` or `[extract] endpoint` set, a model reads them (`model`), and a model that
is absent, slow or answers what is not the candidate schema gives way to the rules, which one
note says.
"""

from __future__ import annotations

from memctl.learn.candidates import Candidate, Message
from memctl.learn.extract import deterministic


def extract_candidates(settings, messages: list[Message]) -> tuple[list[Candidate], list[str]]:
    """The candidates of `messages` and one-line notes (a model that failed, and why)."""
    if settings.get("extract", "command") or settings.get("extract", "endpoint"):
        from memctl.learn.extract import model

        try:
            return model.extract(settings, messages)
        except model.ModelFailed as failure:
            return deterministic.extract(settings, messages), [f"{failure}: used the deterministic extractor"]
    return deterministic.extract(settings, messages), []
