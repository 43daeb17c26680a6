"""The raw logs not archived yet, as the index reads them where they lie (memctl.recall.indexing.sources)."""

from __future__ import annotations

import os

from ga_checkout import make_checkout


def test_a_raw_log_whose_name_is_not_utf8_does_not_warn_on_every_search(tmp_path, run):
    """`archive` reports such a log ("its name is not UTF-8; rename it"); the index cannot key
    it, and used to say so on stderr at every search."""
    checkout = make_checkout(tmp_path)
    checkout.add_real_writer_logs(days=-60)
    odd = os.path.join(os.fsencode(checkout.raw_dir), b"model_responses_\xff.txt")
    with open(odd, "wb") as log:
        log.write(b"=== Prompt === 2026-01-03 10:00:00\nzebrafinch in a badly named log\n\n")
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    for _ in range(2):
        found = run("search", "staging postgres db-03", cwd=checkout.base)
        assert found.returncode == 0 and found.stderr == b"", found.stderr
        assert b"L4:model_responses_947226" in found.stdout
    archived = run("archive", cwd=checkout.base)
    assert b"its name is not UTF-8; rename it" in archived.stderr
