"""Does `mldebug recipes --search` find the right recipe for a pasted error, and how fast?

    python benchmarks/bench_recipes_search.py [--repeat 20]

The cases are the error texts recorded on a real GPU (tests/data/gpu/) and py-spy's real
refusal, each with the recipe that answers it. mldebug's search gets the whole pasted text.
Beside it, the plain alternative a person would do: `grep -ril` of the text's first error
line in the recipe files, taking the first file it lists (or none). Prints, for each, how
many cases put the right recipe first, and the time of one search (best of --repeat).
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from mldebug.recipes.search import search

HERE = Path(__file__).resolve().parent.parent
DATA = HERE / "tests" / "data"
RECIPES = HERE / "mldebug" / "recipes"
CASES = [
    ("gpu/nccl_timeout/stderr.rank0.txt", "nccl-watchdog-timeout"),
    ("gpu/memory/oom_message.txt", "cuda-oom"),
    ("gpu/memory/oom_full_message.txt", "cuda-oom"),
    ("gpu/device_assert/stderr.rank0.txt", "cuda-async-error"),
    ("gpu/nccl_duplicate_gpu/stderr.rank0.txt", "duplicate-gpu"),
    ("gpu/nccl_duplicate_gpu/stdout.rank0.txt", "duplicate-gpu"),
    ("pyspy_error_permission.txt", "ptrace-permission"),
]
ERROR_WORDS = ("error", "warn", "denied", "out of memory", "timeout", "assert")


def first_error_line(text: str) -> str:
    """The line a person would copy: the first that looks like an error, without the
    bracketed prefix torch and NCCL put before it."""
    for line in text.splitlines():
        if any(word in line.lower() for word in ERROR_WORDS):
            return line.split("] ")[-1].strip()[:200]
    return text.splitlines()[0][:200] if text.strip() else ""


def grep_first(line: str) -> str | None:
    done = subprocess.run(
        ["grep", "-rilF", "--include=*.md", "--exclude=README.md", "--", line, str(RECIPES)],
        capture_output=True,
        text=True,
    )
    files = sorted(done.stdout.split())
    return Path(files[0]).stem if files else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    texts = [((DATA / path).read_text(errors="replace"), expected) for path, expected in CASES]

    ours = sum(search(text)[0].recipe.id == expected for text, expected in texts)
    started = time.perf_counter()
    grep_hits = sum(grep_first(first_error_line(text)) == expected for text, expected in texts)
    grep_time = (time.perf_counter() - started) / len(texts)
    best = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        for text, _expected in texts:
            search(text)
        best = min(best, (time.perf_counter() - started) / len(texts))

    print(f"recorded error texts: {len(texts)}")
    print(
        f"mldebug recipes --search (whole text):  right recipe first {ours}/{len(texts)}, "
        f"{best * 1000:.2f} ms per search"
    )
    print(
        f"grep -ril of the first error line:      right recipe first {grep_hits}/{len(texts)}, "
        f"{grep_time * 1000:.2f} ms per search"
    )


if __name__ == "__main__":
    main()
