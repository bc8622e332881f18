"""Outcome checks for wordfreq-script: run on held-out texts, compared with an independent count."""

import os
import re
import subprocess
from collections import Counter

SCRIPT = "/app/wordfreq"
TEXT = (
    "It was the best of times, it was the worst of times; it was the age of wisdom,\n"
    "it was the age of foolishness... IT WAS the epoch of belief -- 42 times, 3rd time!\n"
)


def expected(text: str, n: int) -> list[str]:
    counts = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    return [f"{c} {w}" for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:n]]


def run(text: str, *args: str) -> list[str]:
    out = subprocess.run([SCRIPT, *args], input=text, capture_output=True, text=True, timeout=20).stdout
    return [line.strip() for line in out.strip().splitlines()]


def test_script_is_executable():
    assert os.path.isfile(SCRIPT) and os.access(SCRIPT, os.X_OK)


def test_default_top_ten():
    assert run(TEXT) == expected(TEXT, 10)


def test_explicit_n():
    assert run(TEXT, "3") == expected(TEXT, 3)


def test_case_folding_and_separators():
    text = "Apple apple APPLE; banana-Banana cherry's 7up\n"
    assert run(text, "5") == expected(text, 5)


def test_fewer_words_than_n():
    assert run("one two two\n", "10") == ["2 two", "1 one"]
