"""forget --purge's L4 half: a string leaves history, zips and loose sessions; zips verify."""

from __future__ import annotations

import hashlib
import random
from datetime import datetime

from memctl.l4 import loggen
from memctl.core.config import Layout
from memctl.l4.purge import purge_l4
from l4_helpers import every_byte_under, make_folder, raw_sha_from_show, zips_readable

SECRET = "hunter2-purple-elephant"



def test_purge_removes_a_string_from_every_l4_file_and_keeps_the_rest(run, tmp_path):
    folder = make_folder(tmp_path)
    rng = random.Random(1)
    with_secret = loggen.format_b(datetime(2026, 4, 5, 9, 0), 12, rng, 300,
                                  request=f"remember that the vault phrase is {SECRET} please")
    other = loggen.format_a(datetime(2026, 4, 6, 9, 0), 3, rng, 300)
    folder.add_log("model_responses_1.txt", with_secret)
    folder.add_log("model_responses_2.txt", other)
    assert run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root).returncode == 0
    run("compress", folder.base / "loose.txt", root=folder.root)  # nothing: file absent, error ignored
    loose_source = folder.base / "model_responses_3.txt"
    loose_source.write_text(loggen.format_a(datetime(2026, 4, 7, 9, 0), 1, rng, 50, request=f"x {SECRET} y"))
    assert run("compress", loose_source, root=folder.root).returncode == 0
    assert any(SECRET.encode() in data for _, data in every_byte_under(folder.root))

    layout = Layout(folder.root)
    done = purge_l4(layout, [SECRET.encode()])
    assert done
    # archive builds the search index now; the full purge drops it (purge_steps), this half keeps to L4
    derived = {str(path) for path in layout.index.parent.glob(layout.index.name + "*")}
    leaks = [str(p) for p, data in every_byte_under(folder.root) if SECRET.encode() in data and str(p) not in derived]
    assert leaks == []
    zips_readable(folder.l4)
    records = {r["source"]: r for r in folder.manifest()}
    purged = records["model_responses_1.txt"]
    assert purged["purged"] and purged["sha256"] != folder.originals["model_responses_1.txt"]
    restored = run("show", "--raw", purged["name"], root=folder.root).stdout
    assert hashlib.sha256(restored).hexdigest() == purged["sha256"] and b"[PURGED]" in restored
    untouched = records["model_responses_2.txt"]
    assert raw_sha_from_show(run, folder.root, untouched["name"]) == folder.originals["model_responses_2.txt"]
    assert purge_l4(Layout(folder.root), [SECRET.encode()]) == []  # nothing left to do


def test_streaming_replacement_catches_needles_split_across_writes():
    from memctl.l4.purge import _StreamingReplacer

    text = (b"abc hunter2 def " * 50) + b"tail hunter"
    for size in (1, 2, 3, 5, 7, 64):
        out = []
        replacer = _StreamingReplacer([b"hunter2", b"def"], b"[P]", out.append)
        for start in range(0, len(text), size):
            replacer.feed(text[start:start + size])
        replacer.close()
        assert b"".join(out) == text.replace(b"hunter2", b"[P]").replace(b"def", b"[P]")
        assert replacer.replaced
