"""What `--tiny-model[=SPEC]` asks for: the sizes of the tiny model, parsed and checked.

SPEC is `key=value` pairs separated by commas: `hidden=64,layers=2,heads=4`. It is parsed
by the CLI (a bad one is one line and exit 2) and again in each rank from the environment,
so this module is standard library only and imports nothing else of mldebug.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ENV_TINY_MODEL = "MLDEBUG_TINY_MODEL"  # the SPEC, as given ("" for the defaults)

FALLBACK_ERROR = "error"  # an architecture it cannot shrink: the program gets the error
FALLBACK_LOAD = "load"  # ... the model is loaded as without --tiny-model, said so in the log

DEFAULT_HIDDEN = 64
# With no hidden= given, the embedding and output tables of a kept vocabulary get at most this
# many parameters (hidden shrinks, not below MIN_AUTO_HIDDEN): a tiny model stays under 5 M
# parameters with a 150k-token vocabulary (Qwen2), instead of 20 M at hidden 64.
EMBEDDING_BUDGET = 4_900_000
MIN_AUTO_HIDDEN = 16


@dataclass(frozen=True)
class TinySpec:
    """Upper bounds for the tiny model. A field of the real config that is already smaller
    stays as it is; None: derived (hidden is DEFAULT_HIDDEN, or less where a large kept
    vocabulary would make the embeddings most of the model; kv_heads keeps the model's ratio
    of heads to kv heads, intermediate is 4 * hidden, vocab is kept so the program's token
    ids still fit)."""

    hidden: int | None = None
    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None
    intermediate: int | None = None
    experts: int = 4
    vocab: int | None = None
    fallback: str = FALLBACK_ERROR

    def to_text(self) -> str:
        defaults = TinySpec()
        return ",".join(
            f"{key}={value}"
            for key, value in asdict(self).items()
            if value != getattr(defaults, key)
        )


_MINIMUM = {"hidden": 8, "layers": 1, "heads": 1, "kv_heads": 1, "intermediate": 1}
_MINIMUM.update({"experts": 1, "vocab": 300})  # vocab: the stand-in tokenizer's bytes fit
_KEYS = [field.name for field in fields(TinySpec)]


def parse_spec(text: str | None) -> TinySpec:
    """`TinySpec` from SPEC text; ValueError with a one-line reason when it is not one."""
    values: dict[str, Any] = {}  # checked per key below, TinySpec's fields
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        if key not in _KEYS:
            raise ValueError(f"unknown key {key!r} (known: {', '.join(_KEYS)})")
        if not sep or not value:
            raise ValueError(f"{key} needs a value, as in {key}={_example(key)}")
        if key == "fallback":
            if value not in (FALLBACK_ERROR, FALLBACK_LOAD):
                raise ValueError(f"fallback must be {FALLBACK_ERROR} or {FALLBACK_LOAD}")
            values[key] = value
            continue
        if key == "vocab" and value == "keep":
            values[key] = None
            continue
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{key}={value}: not a whole number") from None
        if number < _MINIMUM[key]:
            raise ValueError(f"{key}={number}: must be at least {_MINIMUM[key]}")
        values[key] = number
    spec = TinySpec(**values)
    if spec.kv_heads is not None and spec.heads % spec.kv_heads:
        raise ValueError(f"kv_heads={spec.kv_heads} must divide heads={spec.heads}")
    return spec


def _example(key: str) -> str:
    return {"fallback": FALLBACK_LOAD, "vocab": "4096 (or keep)"}.get(
        key, str(getattr(TinySpec(), key) or 2)
    )
