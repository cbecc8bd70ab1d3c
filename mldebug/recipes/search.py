"""Rank the recipes by a few words or a pasted error message / log excerpt.

The score is meant to be read: for each recipe it is the sum of
  * BM25 over four fields, weighted: the literal error strings of `match:` (x4), the title
    and the one-line symptom (x2), the body (x1). A query word counts once however often a
    log repeats it, so a long paste is not dominated by its noisiest line;
  * a bonus for every `match:` string found whole in the query (case and spacing ignored):
    the error line a user pasted is the strongest evidence there is.
`search()` returns, beside each score, the literal strings and the words that made it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from mldebug.recipes import Recipe, load_recipes

MAX_QUERY_CHARS = 256 * 1024  # a pasted log beyond this is cut: its head is enough
MAX_QUERY_TERMS = 4000

FIELD_WEIGHTS = {"match": 4.0, "title": 2.0, "symptom": 2.0, "body": 1.0}
K1, B = 1.2, 0.75
PHRASE_BONUS = 4.0  # per literal string found whole, and as much again per word it has:
# the longer the literal, the more specific it is ("Duplicate GPU detected" > "NCCL WARN")

# Sentences torch prints with every error of a kind: they say nothing about which recipe is
# meant (every CUDA OOM message suggests expandable_segments), so they are not searched.
BOILERPLATE = (
    "If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
    "See documentation for Memory Management",
)
_OOM_AMOUNTS = re.compile(
    r"tried to allocate ([\d.]+) ([kmgt]i?b).*?([\d.]+) ([kmgt]i?b) is reserved by pytorch "
    r"but unallocated",
    re.S,
)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
FRAGMENTATION = "cuda-oom-fragmentation"

_WORD = re.compile(r"[a-z_][a-z0-9_]*(?:[.-][a-z0-9_]+)*")
_SPACE = re.compile(r"\s+")
# Words too common in English or in any log line to say which recipe is meant.
STOPWORDS = frozenset(
    "a an and are as at be by can do for from has have if in into is it its not of on or "
    "that the then this to was were will with you your rank ranks error warning line file "
    "py one no all".split()
)


@dataclass(frozen=True)
class Hit:
    recipe: Recipe
    score: float
    matched: tuple[str, ...]  # the recipe's literal strings found in the query
    terms: tuple[str, ...]  # the query words that counted most, best first


def words(text: str) -> list[str]:
    """Lower-case words of `text` (identifiers, dotted and dashed names kept whole, their
    parts too), stopwords and one-letter words dropped."""
    found: list[str] = []
    for word in _WORD.findall(text.lower()):
        parts = [word] + (re.split(r"[.-]", word) if ("." in word or "-" in word) else [])
        found.extend(p for p in parts if len(p) > 1 and p not in STOPWORDS)
    return found


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text.lower()).strip()


@lru_cache(maxsize=512)
def _phrase(literal: str) -> re.Pattern:
    # Whole words at both ends: "OOM" must not match inside "zoom".
    return re.compile(r"(?<!\w)" + re.escape(_normal(literal)) + r"(?!\w)")


def _found(literal: str, normal_query: str) -> bool:
    # The substring test first: most literals are not in the text, and it is far cheaper.
    return _normal(literal) in normal_query and bool(_phrase(literal).search(normal_query))


class Index:
    """Term statistics of a set of recipes, per field."""

    def __init__(self, recipes: tuple[Recipe, ...]) -> None:
        self.recipes = recipes
        self.fields = [
            {
                "match": Counter(words(" ".join(r.match))),
                "title": Counter(words(r.title)),
                "symptom": Counter(words(r.symptom)),
                "body": Counter(words(r.body)),
            }
            for r in recipes
        ]
        count = max(len(recipes), 1)
        self.average = {
            name: max(sum(sum(f[name].values()) for f in self.fields) / count, 1.0)
            for name in FIELD_WEIGHTS
        }
        frequency: Counter = Counter()
        for fields in self.fields:
            frequency.update(set().union(*(set(c) for c in fields.values())))
        self.idf = {
            term: math.log(1 + (count - df + 0.5) / (df + 0.5)) for term, df in frequency.items()
        }

    def score(self, index: int, terms: set[str]) -> tuple[float, dict[str, float]]:
        fields = self.fields[index]
        per_term: dict[str, float] = {}  # each term's share of the score
        for name, weight in FIELD_WEIGHTS.items():
            counts = fields[name]
            length = sum(counts.values())
            norm = K1 * (1 - B + B * length / self.average[name])
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    share = weight * self.idf[term] * tf * (K1 + 1) / (tf + norm)
                    per_term[term] = per_term.get(term, 0.0) + share
        return sum(per_term.values()), per_term


@lru_cache(maxsize=1)
def _shipped_index() -> Index:
    return Index(load_recipes())


def search(query: str, index: Index | None = None, limit: int | None = None) -> list[Hit]:
    """Recipes that the query points to, best first; none when nothing in it matches."""
    index = index or _shipped_index()
    normal = _normal(query[:MAX_QUERY_CHARS])
    for sentence in BOILERPLATE:
        normal = normal.replace(_normal(sentence), " ")
    terms = set(list(dict.fromkeys(words(normal)))[:MAX_QUERY_TERMS])
    hits = []
    for position, recipe in enumerate(index.recipes):
        score, per_term = index.score(position, terms)
        matched = tuple(m for m in recipe.match if _found(m, normal))
        score += sum(PHRASE_BONUS * (1 + len(words(m))) for m in matched)
        if score > 0:
            ranked = sorted(per_term.items(), key=lambda item: -item[1])  # stable, as most_common
            best = tuple(term for term, _ in ranked[:5])
            hits.append(Hit(recipe, round(score, 3), matched, best))
    evidence = fragmented(normal)
    if evidence:  # the numbers say fragmentation: that recipe goes just above the others
        top = max((hit.score for hit in hits), default=0.0)
        hits = [hit for hit in hits if hit.recipe.id != FRAGMENTATION]
        fragmentation = next((r for r in index.recipes if r.id == FRAGMENTATION), None)
        if fragmentation is not None:
            hits.append(Hit(fragmentation, round(top + PHRASE_BONUS * 4, 3), (evidence,), ()))
    hits.sort(key=lambda hit: (-hit.score, hit.recipe.id))
    return hits[:limit] if limit is not None else hits


def fragmented(normal_query: str) -> str:
    """The evidence of an OOM message whose "reserved but unallocated" memory is larger than
    the request it could not serve (fragmentation), or ""."""
    found = _OOM_AMOUNTS.search(normal_query)
    if not found:
        return ""
    asked, asked_unit, cached, cached_unit = found.groups()
    try:
        asked_bytes = float(asked) * _UNITS[asked_unit[0]]
        cached_bytes = float(cached) * _UNITS[cached_unit[0]]
    except ValueError:
        return ""
    if cached_bytes < asked_bytes:
        return ""
    return f"{cached} {cached_unit} reserved but unallocated >= {asked} {asked_unit} requested"
