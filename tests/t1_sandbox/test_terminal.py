"""The one terminal's rules on their own: the bound and the cut, CR-LF, the prompt marker, the first prompt.

Expected texts are built here from the bytes fed in (a 2 MiB bound keeps the first and last MiB of what the
agent would read), never from the module under test.
"""

from __future__ import annotations

import random

from t1_sandbox.terminal import TerminalOutput, prompt_env, prompt_marker, translate_keys

MIB = 1024 * 1024
NONCE = "0123456789abcdef"
MARK = b"\x1b]9;t1-0123456789abcdef;0\x07"  # the marker of a prompt with no job running


def _frames(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rng.choice([1, 2, 7, 4096, 65536])
        out.append(data[i : i + n])
        i += n
    return out


def test_the_marker_is_what_bash_prints_for_the_prompt_variables():
    assert prompt_marker(NONCE) == MARK
    # bash turns \[ \] into nothing, \e into ESC, \a into BEL and \j into its count of jobs
    shown = prompt_env(NONCE)["PS1"].replace("\\[", "").replace("\\]", "").replace("\\j", "0")
    assert shown.replace("\\e", "\x1b").replace("\\a", "\x07").encode() == MARK + b"$ "


def test_a_flood_keeps_the_first_and_last_mib_and_counts_the_rest_at_the_cut_whatever_the_framing():
    text = b"HEAD\r\n" + b"a" * (3 * MIB) + b"\r\nTAIL\r\n" + MARK + b"$ "
    read = text.replace(b"\r\n", b"\n").replace(MARK, b"")  # what the agent reads, 3 MiB + 14 bytes
    expected = read[:MIB] + f"\n[... {len(read) - 2 * MIB} bytes omitted ...]\n".encode() + read[-MIB:]
    for seed in range(3):
        out = TerminalOutput(NONCE)
        for frame in _frames(text, seed):
            out.feed(frame)
        assert out.prompted
        assert out.take() == expected.decode()
        assert out.take() == ""


def test_a_marker_or_crlf_split_between_frames_is_still_removed_or_folded():
    out = TerminalOutput(NONCE)
    for frame in [b"x\r", b"\ny", MARK[:5], MARK[5:-1], MARK[-1:] + b"$ "]:
        out.feed(frame)
    assert out.prompted and out.take() == "x\ny$ "


def test_a_lone_trailing_cr_is_read_now_and_a_half_marker_waits_for_its_end():
    out = TerminalOutput(NONCE)
    out.feed(b"progress 10%\r")
    assert out.take() == "progress 10%\r"
    out.feed(b"done" + MARK[:4])
    assert out.take() == "done" and not out.prompted
    out.feed(MARK[4:] + b"$ ")
    assert out.prompted and out.take() == "$ "


def test_keystrokes_need_a_new_prompt_before_idle():
    out = TerminalOutput(NONCE)
    out.feed(MARK + b"$ ")
    assert out.idle(quiet_s=0)
    out.typed()
    out.feed(b"echo hi\nhi\n")
    assert not out.idle(quiet_s=0)
    out.feed(MARK + b"$ ")
    assert out.idle(quiet_s=0)


def test_what_came_before_the_first_prompt_is_dropped_but_the_prompt_stays():
    out = TerminalOutput(NONCE)
    out.feed(b"login banner\r\nexec env PS1=... bash\r\n" + MARK + b"$ ")
    out.drop_before_prompt()
    assert out.take() == "$ "


def test_a_split_utf8_character_survives_two_reads():
    out = TerminalOutput(NONCE)
    euro = "€".encode()
    out.feed(b"price " + euro[:1])
    first = out.take()
    out.feed(euro[1:])
    assert first + out.take() == "price €"


def test_tmux_key_names_become_their_bytes():
    assert [translate_keys(k) for k in ("C-c", "C-D", "Enter", "Escape", "ls\n")] == [
        "\x03",
        "\x04",
        "\n",
        "\x1b",
        "ls\n",
    ]


def test_the_prompt_carries_bashs_job_count_and_only_a_prompt_with_none_is_done():
    out = TerminalOutput(NONCE)
    out.typed()
    out.feed(b"sleep 9 &\n[1] 42\n" + prompt_marker(NONCE, 1)[:-3])  # split inside the count
    assert not out.prompted and out.take() == "sleep 9 &\n[1] 42\n"
    out.feed(prompt_marker(NONCE, 1)[-3:] + b"$ ")
    assert out.prompted and out.jobs == 1 and not out.at_prompt()
    out.typed()
    out.feed(b"wait\n" + prompt_marker(NONCE, 0) + b"$ ")
    assert out.at_prompt() and out.take() == "$ wait\n$ "


def test_a_marker_with_another_nonce_is_output_not_a_prompt():
    out = TerminalOutput(NONCE)
    other = prompt_marker("fedcba9876543210")
    out.feed(b"x" + other + b"y")
    assert not out.prompted and out.take() == "x" + other.decode() + "y"


async def test_settle_returns_on_the_prompt_without_waiting_for_the_polling_rule():
    import asyncio
    import time

    from t1_sandbox.terminal import settle

    out = TerminalOutput(NONCE)
    out.typed()
    loop = asyncio.get_running_loop()
    loop.call_later(0.005, out.feed, b"true\n" + MARK + b"$ ")
    begin = time.monotonic()
    never_idle = lambda: False  # noqa: E731 - the polling rule alone would wait until the deadline
    await settle(out, until=begin + 5, alive=lambda: True, typed=True, idle=never_idle, confirm=lambda: True)
    assert time.monotonic() - begin < 1.0  # the prompt ended it; the polling rule alone waits 5 s
    refused = TerminalOutput(NONCE)  # the same prompt with the backend refusing to confirm it
    refused.typed()
    loop.call_later(0.005, refused.feed, MARK + b"$ ")
    begin = time.monotonic()
    await settle(
        refused, until=begin + 0.3, alive=lambda: True, typed=True, idle=never_idle, confirm=lambda: False
    )
    assert time.monotonic() - begin >= 0.3
