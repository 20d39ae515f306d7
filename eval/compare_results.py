"""Two result JSONs of one benchmark, side by side: did a re-run reproduce the committed figures?

`compare(old, new, time_rtol)` walks both objects and returns one row per headline figure: a
number or boolean at the same key path (nested dicts joined with "."). Left out: the stamp and
machine description (they say where a run happened, not what it found), load averages, strings,
and the items of lists (per-row records, the timings of individual runs: their summaries are
dicts); a list's length is a figure (``key[#]``: a workload or case more or fewer is a difference).

A figure under a key that names a time (``*_s``, ``*_ms``, ``seconds``, ``wall``, ``latency``,
``ratio``, ``speedup``, ``*5s``-style targets; for a boolean also ``cold`` / ``cached`` / ``warm``) is a timing: it is ``within noise`` when
``|new - old| <= time_rtol * |old|``, and a timing that differs more never fails the comparison
(wall times on a shared 2-core VM move with the load). Any other figure is ``equal`` or
``differs``; a figure present on one side only differs (old only) or is ``added`` (new only).
``--rows KEY`` compares per-row lists too (rows matched by KEY, e.g. ``problem``): a re-run of a
subset marks the rows it did not reach ``not re-run``, which does not fail.

    python -m eval.compare_results OLD.json NEW.json [--json] [--time-rtol 0.25] [--rows KEY]

exits 1 when a non-timing figure differs, 2 on unreadable input.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

# where a run happened, not what it found
SKIP_KEYS = {"commit", "command", "machine", "machine_detail", "date", "date_utc", "stamp_note", "dirty",
             "merged_from", "workdir", "store_note"}
SKIP_KEY_RE = re.compile(r"(^|_)load(avg)?(_|$)")
TIME_TOKENS = {"s", "ms", "us", "sec", "secs", "seconds", "wall", "latency", "time", "ratio", "speedup",
               "throughput", "elapsed", "phases"}
BOOL_TIME_TOKENS = {"cold", "cached", "warm"}  # a met / missed target of a cold or warm timing
TIME_TOKEN_RE = re.compile(r"\d+(s|ms|us)")


def is_timing(path: str, boolean: bool = False) -> bool:
    """True when any key on the path names a duration (or a ratio of durations), or, for a
    boolean, a cold / cached / warm measurement."""
    for key in path.split("."):
        for tok in re.split(r"[_\-@ ]", key.lower()):
            if tok in TIME_TOKENS or TIME_TOKEN_RE.fullmatch(tok) or (boolean and tok in BOOL_TIME_TOKENS):
                return True
    return False


def figures(obj: Any, prefix: str = "", rows: Optional[str] = None) -> Iterator[tuple[str, Any]]:
    """(key path, value) for every number and boolean in nested dicts and every list's length;
    with ``rows``, a list of dicts that all carry that key is walked as ``key[id]`` rows."""
    if not isinstance(obj, dict):
        return
    for key, value in obj.items():
        key = str(key)
        if key in SKIP_KEYS or SKIP_KEY_RE.search(key):
            continue
        path = f"{prefix}.{key}" if prefix else key
        keys = rows.split(",") if rows else []
        if keys and isinstance(value, list) and value and all(isinstance(r, dict) and set(keys) <= set(r) for r in value):
            for row in value:
                yield from figures(row, f"{path}[{'/'.join(str(row[k]) for k in keys)}]", rows)
        elif isinstance(value, list):  # its length is a figure (a case, workload or row more or less)
            yield f"{path}[#]", len(value)
        elif isinstance(value, dict):
            yield from figures(value, path, rows)
        elif isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
            yield path, value


def verdict(path: str, old: Any, new: Any, time_rtol: float, new_rows: frozenset = frozenset()) -> tuple[str, Optional[float]]:
    """(verdict, delta) for one figure; a row the new run did not reach at all is ``not re-run``."""
    if old is None:
        return "added", None
    if new is None:
        row = path.replace("[#]", "").split("]")[0] if "[" in path.replace("[#]", "") else None
        return ("differs" if row is None or row in new_rows else "not re-run"), None
    if isinstance(old, bool) or isinstance(new, bool):
        return ("equal" if old is new else "differs"), None
    delta = new - old
    if math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-12):
        return "equal", delta
    if is_timing(path) and abs(delta) <= time_rtol * abs(old):
        return "within noise", delta
    return "differs", delta


def compare(old: dict, new: dict, time_rtol: float = 0.25, rows_key: Optional[str] = None) -> list[dict[str, Any]]:
    """One row per figure path on either side, in the old file's order, then the new file's extras."""
    a, b = dict(figures(old, rows=rows_key)), dict(figures(new, rows=rows_key))
    new_rows = frozenset(p.replace("[#]", "").split("]")[0] for p in b if "[" in p.replace("[#]", ""))
    rows = []
    for path in list(a) + [p for p in b if p not in a]:
        v, delta = verdict(path, a.get(path), b.get(path), time_rtol, new_rows)
        rows.append({"figure": path, "old": a.get(path), "new": b.get(path), "delta": delta, "verdict": v,
                     "timing": is_timing(path, isinstance(a.get(path, b.get(path)), bool))})
    return rows


def failed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that make the comparison fail: non-timing figures that differ."""
    return [r for r in rows if r["verdict"] == "differs" and not r["timing"]]


def load(path: Path) -> dict:
    """A result JSON (or .json.gz) as a dict; ValueError with a one-line reason otherwise."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        data = json.loads(raw)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a result is a JSON object, this is a {type(data).__name__}")
    return data


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("figure", "old", "new", "delta", "verdict")
    body = [(r["figure"], fmt(r["old"]), fmt(r["new"]), fmt(r["delta"]),
             r["verdict"] + (" (timing)" if r["timing"] and r["verdict"] == "differs" else "")) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body])


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.compare_results", description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path, help="the committed result")
    ap.add_argument("new", type=Path, help="the re-run")
    ap.add_argument("--json", action="store_true", help="rows as JSON instead of a table")
    ap.add_argument("--time-rtol", type=float, default=0.25, help="relative tolerance for timings (0.25)")
    ap.add_argument("--rows", metavar="KEY", help="also compare per-row lists, rows matched by this key (e.g. problem; problem,kernel)")
    args = ap.parse_args(argv)
    try:
        old, new = load(args.old), load(args.new)
    except ValueError as err:
        print(f"compare_results: {err}", file=sys.stderr)
        return 2
    rows = compare(old, new, args.time_rtol, args.rows)
    bad = failed(rows)
    if args.json:
        print(json.dumps({"old": str(args.old), "new": str(args.new), "rows": rows, "failed": len(bad)}, indent=1))
    else:
        print(table(rows))
        counts = {v: sum(r["verdict"] == v for r in rows) for v in ("equal", "within noise", "differs", "added", "not re-run")}
        print(f"\n{len(rows)} figures: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n) +
              f"; {len(bad)} non-timing figure(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
