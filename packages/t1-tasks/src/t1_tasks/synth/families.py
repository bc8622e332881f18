"""Generated task families: text, CSV and file transformations whose parameters appear in the instruction.

Each family draws its input files and 2 to 4 of its operations from one ``random.Random(seed)``; every
operation is a `Step` (an instruction bullet, one to three shell lines, its checks), so the same seed gives
the same task on every machine. Every operation is solvable by a short coreutils / awk pipeline (the
reference solution), and every check fails on the untouched inputs, so a do-nothing agent scores 0.

- ``text``: ``/app/words.txt`` (lower-case words, with repeats) and ``/app/numbers.txt``: sort (forward or
  reversed), distinct lines, exact-line counts, first / last N lines, upper case, numeric sort, line count,
  lines with a prefix.
- ``csv``: ``/app/data.csv`` (``id,name,city,score``, distinct names and scores): one column, rows of one
  city, rows per city, score sum, the top N names by score, the lowest-scoring name.
- ``files``: files under ``/app/files/``: rename, delete by extension, copy by extension into a folder, list
  by extension, make scripts executable, concatenate parts. One check per file the operation touches, so
  the assertion count grows with the number of files. The files an operation selects by extension are input
  data, not parameters (the instruction names the extension, not the files).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from t1_tasks.synth.model import Check, Instance, Step

__all__ = ["FAMILIES", "generate"]

WORDS = (
    "apple amber anchor arrow badge basil beacon birch cable candle cedar cherry cobalt coral daisy delta "
    "ember falcon fennel fig garnet ginger harbor hazel iris ivory jasper juniper kettle lemon lilac linen "
    "maple marble meadow nectar nutmeg olive onyx orchid pebble pepper quartz quill raven ribbon saffron "
    "sage thistle timber tulip umber velvet walnut willow yarrow zephyr"
).split()
NAMES = (
    "ada alan alice bob carol dave erin frank grace heidi ivan judy mallory nina oscar peggy quinn rupert "
    "sybil trent ursula victor wendy xavier yara zoe"
).split()
CITIES = ("berlin", "lima", "oslo", "paris", "quito", "rome", "tokyo", "vienna")


def _lines_checks(key: str, path: str, lines: list[str]) -> tuple[Check, ...]:
    """The three checks of a step that writes a list of lines: the file, its line count, its lines."""
    return (
        Check(f"{key}_written", "exists", path),
        Check(f"{key}_line_count", "line_count", path, len(lines)),
        Check(f"{key}_lines", "lines", path, tuple(lines)),
    )


def _value_checks(key: str, path: str, value: str) -> tuple[Check, ...]:
    """The two checks of a step that writes one value: the file and its stripped content."""
    return (Check(f"{key}_written", "exists", path), Check(f"{key}_value", "text", path, value))


# ---- text: /app/words.txt and /app/numbers.txt


def _text_inputs(rng: random.Random) -> dict[str, object]:
    vocab = rng.sample(WORDS, rng.randint(8, 14))
    words = [rng.choice(vocab) for _ in range(rng.randint(12, 28))]
    numbers = [rng.randint(1, 999) for _ in range(rng.randint(6, 14))]
    return {"words": words, "numbers": numbers}


def _text_sort(rng: random.Random, d: dict) -> Step:
    rev = rng.random() < 0.5
    out = "sorted_desc.txt" if rev else "sorted.txt"
    order = "in reverse byte order (z first)" if rev else "in byte order (a first)"
    return Step(
        "sort",
        (out, rev),
        f"`/app/{out}`: every line of `/app/words.txt`, repeats kept, {order}.",
        (f"LC_ALL=C sort{' -r' if rev else ''} words.txt > {out}",),
        _lines_checks("sort", out, sorted(d["words"], reverse=rev)),
    )


def _text_distinct(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["distinct.txt", "unique.txt", "dedup.txt"])
    return Step(
        "distinct",
        (out,),
        f"`/app/{out}`: the distinct lines of `/app/words.txt`, each once, in byte order.",
        (f"LC_ALL=C sort -u words.txt > {out}",),
        _lines_checks("distinct", out, sorted(set(d["words"]))),
    )


def _text_count(rng: random.Random, d: dict) -> Step:
    word = rng.choice(sorted(set(d["words"])))
    out = f"count_{word}.txt"
    return Step(
        "count",
        (out, word),
        f"`/app/{out}`: the number of lines of `/app/words.txt` that are exactly `{word}`, as a bare number.",
        (f"grep -cx {word} words.txt > {out}",),
        _value_checks("count", out, str(d["words"].count(word))),
    )


def _text_head(rng: random.Random, d: dict) -> Step:
    n = rng.randint(2, 6)
    out = f"first_{n}.txt"
    return Step(
        "head",
        (out, n),
        f"`/app/{out}`: the first {n} lines of `/app/words.txt`, in their order.",
        (f"head -n {n} words.txt > {out}",),
        _lines_checks("head", out, d["words"][:n]),
    )


def _text_tail(rng: random.Random, d: dict) -> Step:
    n = rng.randint(2, 6)
    out = f"last_{n}.txt"
    return Step(
        "tail",
        (out, n),
        f"`/app/{out}`: the last {n} lines of `/app/words.txt`, in their order.",
        (f"tail -n {n} words.txt > {out}",),
        _lines_checks("tail", out, d["words"][-n:]),
    )


def _text_upper(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["upper.txt", "shout.txt", "caps.txt"])
    return Step(
        "upper",
        (out,),
        f"`/app/{out}`: every line of `/app/words.txt` in upper case, in their order.",
        (f"tr a-z A-Z < words.txt > {out}",),
        _lines_checks("upper", out, [w.upper() for w in d["words"]]),
    )


def _text_numsort(rng: random.Random, d: dict) -> Step:
    rev = rng.random() < 0.5
    out = "numbers_desc.txt" if rev else "numbers_asc.txt"
    order = "largest first" if rev else "smallest first"
    return Step(
        "numsort",
        (out, rev),
        f"`/app/{out}`: the numbers of `/app/numbers.txt` (one a line) sorted by value, {order}.",
        (f"sort -n{'r' if rev else ''} numbers.txt > {out}",),
        _lines_checks("numsort", out, [str(x) for x in sorted(d["numbers"], reverse=rev)]),
    )


def _text_linecount(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["line_count.txt", "n_lines.txt"])
    return Step(
        "linecount",
        (out,),
        f"`/app/{out}`: the number of lines of `/app/words.txt`, as a bare number.",
        (f"wc -l < words.txt > {out}",),
        _value_checks("linecount", out, str(len(d["words"]))),
    )


def _text_prefix(rng: random.Random, d: dict) -> Step:
    letter = rng.choice(sorted({w[0] for w in d["words"]}))
    out = f"starts_{letter}.txt"
    return Step(
        "prefix",
        (out, letter),
        f"`/app/{out}`: the lines of `/app/words.txt` that start with `{letter}`, in their order.",
        (f"grep '^{letter}' words.txt > {out}",),
        _lines_checks("prefix", out, [w for w in d["words"] if w.startswith(letter)]),
    )


# ---- csv: /app/data.csv (id,name,city,score)


def _csv_inputs(rng: random.Random) -> dict[str, object]:
    n = rng.randint(8, 18)
    names = rng.sample(NAMES, n)
    cities = rng.sample(CITIES, rng.randint(3, 5))
    scores = rng.sample(range(10, 1000), n)
    rows = [(str(i + 1), names[i], rng.choice(cities), str(scores[i])) for i in range(n)]
    return {"rows": rows}


def _csv_column(rng: random.Random, d: dict) -> Step:
    col = rng.choice(["name", "city", "score"])
    idx = ("id", "name", "city", "score").index(col) + 1
    out = f"column_{col}.txt"
    return Step(
        "column",
        (out, col),
        f"`/app/{out}`: the `{col}` column of `/app/data.csv`, one value a line, without the header, in "
        "row order.",
        (f"tail -n +2 data.csv | cut -d, -f{idx} > {out}",),
        _lines_checks("column", out, [r[idx - 1] for r in d["rows"]]),
    )


def _csv_city(rng: random.Random, d: dict) -> Step:
    city = rng.choice(sorted({r[2] for r in d["rows"]}))
    out = f"in_{city}.csv"
    return Step(
        "city",
        (out, city),
        f"`/app/{out}`: the rows of `/app/data.csv` whose city is `{city}`, unchanged, without the header, "
        "in row order.",
        (f"awk -F, 'NR > 1 && $3 == \"{city}\"' data.csv > {out}",),
        _lines_checks("city", out, [",".join(r) for r in d["rows"] if r[2] == city]),
    )


def _csv_per_city(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["city_counts.csv", "per_city.csv"])
    counts = Counter(r[2] for r in d["rows"])
    return Step(
        "per_city",
        (out,),
        f"`/app/{out}`: one line `city,count` per city of `/app/data.csv` (its number of rows), no header, "
        "cities in byte order.",
        (
            "tail -n +2 data.csv | cut -d, -f3 | LC_ALL=C sort | uniq -c | "
            + f"awk '{{print $2 \",\" $1}}' > {out}",
        ),
        _lines_checks("per_city", out, [f"{c},{counts[c]}" for c in sorted(counts)]),
    )


def _csv_sum(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["score_sum.txt", "total_score.txt"])
    return Step(
        "sum",
        (out,),
        f"`/app/{out}`: the sum of the `score` column of `/app/data.csv`, as a bare integer.",
        (f"awk -F, 'NR > 1 {{ s += $4 }} END {{ print s }}' data.csv > {out}",),
        _value_checks("sum", out, str(sum(int(r[3]) for r in d["rows"]))),
    )


def _csv_top(rng: random.Random, d: dict) -> Step:
    n = rng.randint(2, 5)
    out = f"top_{n}.txt"
    best = sorted(d["rows"], key=lambda r: -int(r[3]))[:n]
    return Step(
        "top",
        (out, n),
        f"`/app/{out}`: the names of the {n} rows of `/app/data.csv` with the highest score, highest first, "
        "one a line.",
        (f"tail -n +2 data.csv | sort -t, -k4,4nr | head -n {n} | cut -d, -f2 > {out}",),
        _lines_checks("top", out, [r[1] for r in best]),
    )


def _csv_lowest(rng: random.Random, d: dict) -> Step:
    out = rng.choice(["lowest.txt", "last_place.txt"])
    low = min(d["rows"], key=lambda r: int(r[3]))
    return Step(
        "lowest",
        (out,),
        f"`/app/{out}`: the name in the row of `/app/data.csv` with the lowest score.",
        (f"tail -n +2 data.csv | sort -t, -k4,4n | head -n 1 | cut -d, -f2 > {out}",),
        _value_checks("lowest", out, low[1]),
    )


# ---- files: /app/files/
# Every operation creates its own files (names unique in the task, an extension no other operation uses).


def _fresh(rng: random.Random, d: dict, ext: str, k: int) -> list[str]:
    """``k`` new file names ``files/<word><digit>.<ext>``, unused so far in this task."""
    out = []
    while len(out) < k:
        name = f"files/{rng.choice(WORDS)}{rng.randint(0, 9)}.{ext}"
        if name not in d["inputs"]:
            d["inputs"][name] = ""
            out.append(name)
    return out


def _body(rng: random.Random) -> str:
    return "\n".join(" ".join(rng.sample(WORDS, 3)) for _ in range(rng.randint(1, 3))) + "\n"


def _files_rename(rng: random.Random, d: dict) -> Step:
    old, new = _fresh(rng, d, "txt", 2)
    body = d["inputs"][old] = _body(rng)
    del d["inputs"][new]
    return Step(
        "rename",
        (old, new),
        f"Rename `/app/{old}` to `/app/{new}` (same folder, content unchanged).",
        (f"mv {old} {new}",),
        (Check("rename_new_content", "content", new, body), Check("rename_old_gone", "absent", old)),
    )


def _files_delete(rng: random.Random, d: dict) -> Step:
    ext = rng.choice(["tmp", "bak", "old"])
    victims = _fresh(rng, d, ext, rng.randint(2, 4))
    for v in victims:
        d["inputs"][v] = _body(rng)
    return Step(
        "delete",
        (ext,),
        f"Delete every `.{ext}` file in `/app/files/`.",
        (f"rm -f files/*.{ext}",),
        tuple(Check(f"delete_gone_{i}", "absent", v) for i, v in enumerate(victims)),
    )


def _files_collect(rng: random.Random, d: dict) -> Step:
    ext = rng.choice(["cfg", "conf", "ini"])
    folder = rng.choice(["backup", "saved", "archive"])
    kept = _fresh(rng, d, ext, rng.randint(2, 4))
    checks = []
    for i, f in enumerate(kept):
        body = d["inputs"][f] = _body(rng)
        checks.append(Check(f"collect_copy_{i}", "content", f"{folder}/{f.removeprefix('files/')}", body))
    return Step(
        "collect",
        (ext, folder),
        f"Copy every `.{ext}` file of `/app/files/` into a new folder `/app/{folder}/` (same names; keep "
        "the originals).",
        (f"mkdir -p {folder}", f"cp files/*.{ext} {folder}/"),
        tuple(checks),
    )


def _files_list(rng: random.Random, d: dict) -> Step:
    ext = rng.choice(["log", "md", "dat"])
    listed = _fresh(rng, d, ext, rng.randint(2, 5))
    for f in listed:
        d["inputs"][f] = _body(rng)
    out = f"{ext}_files.txt"
    names = sorted(f.removeprefix("files/") for f in listed)
    return Step(
        "list",
        (out, ext),
        f"`/app/{out}`: the names (no folder) of the `.{ext}` files in `/app/files/`, one a line, in byte "
        "order.",
        (f"ls files | grep '\\.{ext}$' | LC_ALL=C sort > {out}",),
        _lines_checks("list", out, names),
    )


def _files_chmod(rng: random.Random, d: dict) -> Step:
    scripts = _fresh(rng, d, "sh", rng.randint(1, 3))
    for s in scripts:
        d["inputs"][s] = f"#!/bin/sh\necho {rng.choice(WORDS)}\n"
    return Step(
        "chmod",
        (),
        "Make every `.sh` file in `/app/files/` executable by its owner.",
        ("chmod u+x files/*.sh",),
        tuple(Check(f"chmod_exec_{i}", "executable", s) for i, s in enumerate(scripts)),
    )


def _files_concat(rng: random.Random, d: dict) -> Step:
    parts = _fresh(rng, d, "part", rng.randint(2, 3))
    bodies = []
    for p in parts:
        bodies.append(_body(rng))
        d["inputs"][p] = bodies[-1]
    (whole,) = _fresh(rng, d, "joined", 1)
    del d["inputs"][whole]
    listed = ", ".join(f"`/app/{p}`" for p in parts)
    return Step(
        "concat",
        (whole, *parts),
        f"`/app/{whole}`: the contents of {listed}, in that order, one after the other.",
        (f"cat {' '.join(parts)} > {whole}",),
        (Check("concat_content", "content", whole, "".join(bodies)),),
    )


Op = Callable[[random.Random, dict], Step]
FAMILIES: dict[str, tuple[Op, ...]] = {
    "text": (
        _text_sort,
        _text_distinct,
        _text_count,
        _text_head,
        _text_tail,
        _text_upper,
        _text_numsort,
        _text_linecount,
        _text_prefix,
    ),
    "csv": (_csv_column, _csv_city, _csv_per_city, _csv_sum, _csv_top, _csv_lowest),
    "files": (_files_rename, _files_delete, _files_collect, _files_list, _files_chmod, _files_concat),
}
"""Family name -> its operations; an instance draws 2 to 4 distinct ones."""

PREAMBLES = {
    "text": "`/app/words.txt` holds one lower-case word a line (words repeat); `/app/numbers.txt` holds one "
    "positive integer a line.",
    "csv": "`/app/data.csv` holds a header line `id,name,city,score` and one row a line (names and scores "
    "are distinct; scores are integers).",
    "files": "`/app/files/` holds plain files.",
}


def generate(family: str, seed: int) -> Instance:
    """The task instance of ``family`` drawn from ``seed`` (deterministic: same arguments, same task).

    Args:
        family: a key of `FAMILIES` (``text``, ``csv``, ``files``).
        seed: any non-negative integer.

    Raises:
        ValueError: an unknown family (named, with the known ones) or a negative seed.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}: known are {', '.join(sorted(FAMILIES))}")
    if seed < 0:
        raise ValueError(f"seed {seed} for family {family!r}: give a non-negative integer")
    rng = random.Random(f"t1-synth/{family}/{seed}")
    ops = rng.sample(FAMILIES[family], rng.randint(2, 4))
    data: dict = {"inputs": {}}
    if family == "text":
        data |= _text_inputs(rng)
    elif family == "csv":
        data |= _csv_inputs(rng)
    steps = tuple(op(rng, data) for op in ops)
    inputs: dict[str, str] = dict(data["inputs"])
    if family == "text":
        inputs["words.txt"] = "".join(f"{w}\n" for w in data["words"])
        inputs["numbers.txt"] = "".join(f"{x}\n" for x in data["numbers"])
    elif family == "csv":
        inputs["data.csv"] = "id,name,city,score\n" + "".join(",".join(r) + "\n" for r in data["rows"])
    return Instance(family, seed, PREAMBLES[family], steps, inputs)
