"""Strict YAML/JSON loading: duplicate mapping keys are an error, not a silent overwrite."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from selector.errors import ProblemError


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ProblemError(str(key), f"duplicate key on line {line}")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict; raises ProblemError on any syntax problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ProblemError(str(p), f"cannot read file ({exc.strerror})")
    try:
        if p.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_no_dup_pairs)
        else:
            data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - strict safe loader
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProblemError(str(p), f"malformed {'JSON' if p.suffix == '.json' else 'YAML'}: {first}")
    if not isinstance(data, dict):
        raise ProblemError(str(p), "top level must be a mapping")
    return data


def _no_dup_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ProblemError(k, "duplicate key")
        out[k] = v
    return out
