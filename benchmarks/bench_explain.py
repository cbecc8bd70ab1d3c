"""Does `mldebug explain` put the cause first on what users paste, beside the plain way?

    python benchmarks/bench_explain.py [-v]
    python benchmarks/bench_explain.py --wide [-v] [--hide-held-out]

The plain run ends with the wide corpus's lines; `--wide` prints those alone. They score the
wide corpus of tests/data/explain_corpus/ (manifest.json, issue 26): pastes
modelled on public threads of many projects, in every pasting style, labelled from each
thread's outcome before explain ran on them. It prints in one run: top finding and recipe
right on the corpus, on the 40 cases held out, and false alarms on the healthy pastes, beside
the plain way (`grep -i error | mldebug recipes --search -`: the first recipe of the search on
every line grep finds; on a healthy paste, any line grep finds is a false alarm).
`--hide-held-out` leaves the held-out cases out (while readers are being written).

The cases are the corpus of tests/data/explain/ (index.json): fragments written for mldebug
in the formats of public issue threads, each with the cause the thread established, as a
finding kind, its ranks and a recipe. For each case:

- mldebug explain: its top finding (kind and ranks) and that finding's recipe;
- `mldebug nccl` (the NCCL/torch reader alone, as it was before explain): its top recipe,
  and whether it found anything at all;
- the plain way: `grep -i -m1 error` for the first error line of the log, then
  `recipes --search` on that line (the same search the command runs), its first recipe.

Prints the share of cases each gets right, per class (the file name's first word) the
cases explain gets wrong, and the time explain takes per case. The corpus was written while
the readers were: most cases are ones the readers were built against; those marked held_out
were written after, and measured before any change for them (their own line).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from mldebug.explain.engine import explain_text  # noqa: E402
from mldebug.nccl import scan as nccl_scan  # noqa: E402
from mldebug.nccl.logfacts import FileLog  # noqa: E402
from mldebug.nccl.logparse import parse_bytes  # noqa: E402
from mldebug.recipes.search import search  # noqa: E402

CORPUS = HERE / "tests" / "data" / "explain"
WIDE = HERE / "tests" / "data" / "explain_corpus"
HEALTHY = "healthy"


def grep_first_error(path: Path) -> str:
    done = subprocess.run(["grep", "-i", "-m1", "error", str(path)], capture_output=True)
    return done.stdout.decode("utf-8", "replace").strip()


def plain_recipe(path: Path) -> str | None:
    line = grep_first_error(path)
    hits = search(line, limit=1) if line else []
    return hits[0].recipe.id if hits else None


def nccl_recipe(data: bytes, name: str) -> str | None:
    scan = nccl_scan.Scan(logs=[FileLog(name, parse_bytes(data, name), len(data))])
    nccl_scan.finish(scan)
    errors = [f for f in scan.findings if f.severity == "error"]
    return (errors or scan.findings or [None])[0] and (errors or scan.findings)[0].recipe


def grep_errors(path: Path) -> str:
    done = subprocess.run(["grep", "-i", "error", str(path)], capture_output=True)
    return done.stdout.decode("utf-8", "replace")


def alarms(found) -> list:
    return [f for f in found if f.severity in ("error", "warning")]


def wide(verbose: bool, hide_held_out: bool) -> None:
    """The wide corpus: explain's top finding and recipe, and the plain way's recipe."""
    cases = json.loads((WIDE / "manifest.json").read_text())["cases"]
    if hide_held_out:
        cases = [c for c in cases if not c["held_out"]]
    got: Counter = Counter()
    wrong: Counter = Counter()
    for case in cases:
        path = WIDE / case["file"]
        found = explain_text(path.read_bytes().decode("utf-8", "replace"), case["file"])
        lines = grep_errors(path)
        hits = search(lines, limit=1) if lines.strip() else []
        plain = hits[0].recipe.id if hits else None
        group = "held" if case["held_out"] else "seen"
        got[group] += 1
        if case["kind"] == HEALTHY:
            got[group + " healthy"] += 1
            loud = alarms(found)
            got[group + " alarms"] += bool(loud)
            got[group + " plain alarms"] += bool(lines.strip())
            ok = not loud
            said = f"{loud[0].kind}/{loud[0].recipe}" if loud else "quiet"
        else:
            top = found[0] if found else None
            ok = bool(top) and (top.kind, top.recipe) == (case["kind"], case["recipe"])
            got[group + " plain"] += plain == case["recipe"]
            said = f"{top.kind}/{top.recipe}" if top else "nothing"
        got[group + " right"] += ok
        if not ok:
            wrong[case["kind"]] += 1
        if verbose or not ok:
            print(
                f"  {'ok ' if ok else 'BAD'} {'H' if case['held_out'] else ' '} {case['file']:<44} "
                f"explain {said:<44} plain {plain}  (want {case['kind']}/{case['recipe']})"
            )
    for group, name in (("seen", "corpus"), ("held", "held out")):
        total = got[group]
        if not total:
            continue
        problems = total - got[group + " healthy"]
        print(
            f"wide {name}: {total} pastes ({problems} problems, {got[group + ' healthy']} healthy)"
        )
        print(
            f"  mldebug explain, top finding and recipe right (healthy: quiet): {share(got[group + ' right'], total)}"
        )
        print(
            f"  grep -i error | recipes --search -, top recipe right:         {share(got[group + ' plain'], problems)}"
        )
        print(
            f"  mldebug explain, false alarms on the healthy pastes:          {share(got[group + ' alarms'], got[group + ' healthy'])}"
        )
        print(
            f"  grep -i error, a line found on the healthy pastes:            {share(got[group + ' plain alarms'], got[group + ' healthy'])}"
        )
    weak = ", ".join(f"{k} ({n})" for k, n in wrong.most_common()) or "none"
    print(f"wide: kinds explain gets wrong: {weak}")


def big_log(lines: int = 300_000) -> None:
    """A long log: NCCL INFO chatter of 8 ranks with one corpus fragment in its middle, read
    by explain (CPU time, one core) beside `grep -c Watchdog` on the same file."""
    import tempfile

    chatter = [
        f"[rank{i % 8}]:gpu-{i % 8}:{4100 + i % 8}:{4200 + i % 8} [{i % 8}] NCCL INFO Channel "
        f"{i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC/read"
        for i in range(lines)
    ]
    fragment = (CORPUS / "timeout_rank6_absent.log").read_text().rstrip("\n").split("\n")
    text = "\n".join(chatter[: lines // 2] + fragment + chatter[lines // 2 :]) + "\n"
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as out:
        out.write(text)
    path = Path(out.name)
    try:
        from mldebug.explain.engine import explain

        started = time.process_time()
        top = explain([str(path)]).findings[0]
        cpu = time.process_time() - started
        started = time.perf_counter()
        subprocess.run(["grep", "-c", "Watchdog", str(path)], capture_output=True)
        grep = time.perf_counter() - started
        size = path.stat().st_size / (1 << 20)
        print(
            f"a {size:.0f} MB log ({lines:,} lines): explain {cpu:.2f} s of CPU "
            f"({size / cpu:.0f} MB/s), top finding {top.kind} ranks {list(top.ranks)}; "
            f"grep -c Watchdog {grep:.2f} s (wall)"
        )
    finally:
        path.unlink()


def dense_log(copies: int = 10) -> None:
    """A log thick with errors: every corpus fragment, `copies` times over (many findings,
    each citing many lines: where a quadratic step would show), read by explain."""
    text = "\n".join(p.read_text(errors="replace") for p in sorted(CORPUS.glob("*.log")))
    for times in (1, copies):
        started = time.process_time()
        found = explain_text(text * times)
        cpu = time.process_time() - started
        print(
            f"an error-dense paste of {len(text) * times / 1024:.0f} KB: explain {cpu:.2f} s of "
            f"CPU, {len(found)} findings"
        )


def share(count: int, total: int) -> str:
    return f"{count:3d}/{total} ({100 * count / total:5.1f}%)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-v", "--verbose", action="store_true", help="every case")
    parser.add_argument("--wide", action="store_true", help="the wide corpus (issue 26) only")
    parser.add_argument("--hide-held-out", action="store_true", help="--wide without the held out")
    args = parser.parse_args()
    if args.wide:
        wide(args.verbose, args.hide_held_out)
        return
    cases = json.loads((CORPUS / "index.json").read_text())["cases"]
    got = Counter()
    wrong: Counter = Counter()
    classes: Counter = Counter()
    took = []
    for case in cases:
        path = CORPUS / case["file"]
        data = path.read_bytes()
        started = time.perf_counter()
        found = explain_text(data.decode("utf-8", "replace"), case["file"])
        took.append(time.perf_counter() - started)
        top = found[0] if found else None
        kind_ok = bool(top) and (top.kind, list(top.ranks)) == (case["kind"], case["ranks"])
        recipe_ok = bool(top) and top.recipe == case["recipe"]
        nccl = nccl_recipe(data, case["file"])
        plain = plain_recipe(path)
        klass = case["file"].split("_", 1)[0]
        classes[klass] += 1
        got["explain both"] += kind_ok and recipe_ok
        got["explain finding"] += kind_ok
        got["explain recipe"] += recipe_ok
        got["nccl recipe"] += nccl == case["recipe"]
        got["nccl anything"] += nccl is not None
        got["plain recipe"] += plain == case["recipe"]
        if case.get("held_out"):
            got["held out"] += 1
            got["held out right"] += kind_ok and recipe_ok
        if not (kind_ok and recipe_ok):
            wrong[klass] += 1
        if args.verbose or not (kind_ok and recipe_ok):
            print(
                f"  {'ok ' if kind_ok and recipe_ok else 'BAD'} {case['file']:<38} explain "
                f"{top.kind if top else None}/{top.recipe if top else None}  nccl {nccl}  "
                f"plain {plain}  (want {case['kind']}/{case['recipe']})"
            )
    total = len(cases)
    print(
        f"{total} cases, {len(classes)} classes: {', '.join(f'{k} {n}' for k, n in sorted(classes.items()))}"
    )
    print(
        f"mldebug explain, top finding (kind and ranks) and its recipe right: {share(got['explain both'], total)}"
    )
    if got["held out"]:
        print(
            "mldebug explain, the held-out cases (written after the readers):    "
            + share(got["held out right"], got["held out"])
        )
    print(
        f"mldebug explain, top finding right:                            {share(got['explain finding'], total)}"
    )
    print(
        f"mldebug explain, top recipe right:                             {share(got['explain recipe'], total)}"
    )
    print(
        f"mldebug nccl alone, top recipe right:                          {share(got['nccl recipe'], total)}"
    )
    print(
        f"mldebug nccl alone, any finding at all:                        {share(got['nccl anything'], total)}"
    )
    print(
        f"grep -i error | recipes --search, top recipe right:            {share(got['plain recipe'], total)}"
    )
    took.sort()
    print(
        f"explain per case: median {1000 * took[len(took) // 2]:.1f} ms, "
        f"slowest {1000 * took[-1]:.1f} ms (one core, in-process)"
    )
    big_log()
    dense_log()
    weak = ", ".join(f"{k} ({n} of {classes[k]})" for k, n in wrong.most_common()) or "none"
    print(f"classes explain gets wrong: {weak}")
    wide(args.verbose, args.hide_held_out)


if __name__ == "__main__":
    main()
