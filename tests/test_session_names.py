"""Session ids become file names that are one file per id on every system (issue #30: `CON`).

Windows refuses a file named for a device (CON, NUL, COM1, also with an extension) and drops a
trailing dot; macOS and Windows fold case, so `Abc` and `abc` would share one buffer."""

import pytest

from memctl.learn.buffer import encoded_name

DEVICE_IDS = ["CON", "con", "Nul.txt", "aux", "PRN.log", "COM1", "lpt9", "conin$", "CON .x"]


@pytest.mark.parametrize("session_id", DEVICE_IDS)
def test_a_device_name_is_never_a_file_name(session_id):
    stem = encoded_name(session_id).split(".", 1)[0].split("~", 1)[0].upper()
    assert stem not in {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    assert not (len(stem) == 4 and stem[:3] in ("COM", "LPT") and stem[3].isdigit())


def test_names_that_merely_begin_like_a_device_are_kept_readable():
    assert encoded_name("console-1") == "console-1"
    assert encoded_name("com10") == "com10"
    assert encoded_name("nullable") == "nullable"


def test_ids_differing_only_in_case_get_names_differing_beyond_case():
    names = {encoded_name(i).lower() for i in ("chat-A", "chat-a", "CHAT-A", "Chat-a")}
    assert len(names) == 4


def test_a_trailing_or_leading_dot_is_escaped():
    assert not encoded_name("a.").endswith(".")
    assert encoded_name("a.") != encoded_name("a")
    assert not encoded_name(".hidden").startswith(".")


def test_a_plain_lowercase_id_keeps_its_name():
    assert encoded_name("chat-1") == "chat-1"
    assert encoded_name("2026-12-05.run_3") == "2026-12-05.run_3"
