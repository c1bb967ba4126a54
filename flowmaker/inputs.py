"""Reading user files with bounds: size, text encoding, nesting depth; YAML and JSON with
duplicate keys refused and syntax errors located (line and column).

Every failure is an :class:`InputError` whose message names the file; the caller turns it into
its own one-line error. Bounds: :data:`MAX_YAML_BYTES` per YAML file, :data:`MAX_TEXT_BYTES` per
JSON file (the largest shipped file is ~1 MB), :data:`MAX_DEPTH` levels of nesting (shipped files
use < 10), :data:`MAX_NODES` values after expanding aliases.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

MAX_TEXT_BYTES = 64 * 2**20
#: YAML is parsed in pure Python (~1 s per 2 MB): a smaller bound keeps a parse within seconds;
#: the largest YAML a user makes (a resolved problem of the 125-model catalog) is ~2 MB
MAX_YAML_BYTES = 8 * 2**20
MAX_DEPTH = 100


class InputError(ValueError):
    """A user file cannot be read or parsed: ``path`` and a one-line ``message``;
    ``str(exc)`` is ``"path: message"``."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path, self.message = str(path), message
        super().__init__(f"{path}: {message}" if str(path) else message)


def read_bytes(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """At most ``max_bytes`` bytes of ``path``; InputError for a missing, unreadable or larger file
    (reads ``max_bytes + 1`` at most, so ``/dev/zero`` ends quickly)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "is a folder, not a file")
    if not p.exists():
        raise InputError(p, "no such file; cannot read it")
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(p, f"cannot read file ({exc.strerror or type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise InputError(p, f"larger than {max_bytes / 2**20:.0f} MiB; refusing to read it")
    return data


def read_text(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """``path`` as UTF-8 text (bounded as :func:`read_bytes`); a binary file is an InputError."""
    data = read_bytes(path, max_bytes=max_bytes)
    if b"\x00" in data:
        raise InputError(path, "a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing duplicate mapping keys."""


class DuplicateKey(ValueError):
    def __init__(self, key: Any, line: int, column: int) -> None:
        super().__init__(f"duplicate key {str(key)!r} on line {line}, column {column}")
        self.key, self.line, self.column = key, line, column


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:               # an unhashable key: the base constructor says so
            break
        if dup:
            m = key_node.start_mark
            raise DuplicateKey(key, m.line + 1, m.column + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _no_dup_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k, 0, 0)
        out[k] = v
    return out


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = getattr(exc, "problem", None)
    if not what:
        text = str(exc).strip()
        what = text.splitlines()[0] if text else type(exc).__name__
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else str(what)


#: values (scalars, lists, mappings) a file may expand to, shared aliases counted at every use
MAX_NODES = 2_000_000


def check_depth(data: Any, *, limit: int = MAX_DEPTH, where: str = "") -> None:
    """InputError when ``data`` nests lists and mappings deeper than ``limit``, refers to itself
    (a recursive YAML alias), or expands to more than :data:`MAX_NODES` values (aliases counted
    at every use). Recursion is bounded by ``limit``; a shared value is walked once."""
    memo: dict[int, tuple[int, int]] = {}   # id -> (expanded size, height)
    on_path: set[int] = set()

    def walk(obj: Any, depth: int) -> tuple[int, int]:
        if not isinstance(obj, (dict, list, tuple)):
            return 1, 0
        if depth > limit:
            raise InputError(where, f"nested more than {limit} levels deep")
        key = id(obj)
        if key in on_path:
            raise InputError(where, "a value contains itself (recursive alias)")
        if key not in memo:
            on_path.add(key)
            size, height = 1, 0
            for child in (obj.values() if isinstance(obj, dict) else obj):
                s, h = walk(child, depth + 1)
                size, height = size + s, max(height, h + 1)
                if size > MAX_NODES:
                    raise InputError(where, f"expands to more than {MAX_NODES:,} values")
            on_path.discard(key)
            memo[key] = (size, height)
        size, height = memo[key]
        if depth + height > limit:
            raise InputError(where, f"nested more than {limit} levels deep")
        return size, height

    total, _ = walk(data, 1)
    if total > MAX_NODES:
        raise InputError(where, f"expands to more than {MAX_NODES:,} values")


def parse_text(text: str, *, json_syntax: bool, where: str) -> Any:
    """YAML (or JSON) text as Python data; InputError naming ``where`` with line and column."""
    kind = "JSON" if json_syntax else "YAML"
    try:
        data = (json.loads(text, object_pairs_hook=_no_dup_pairs) if json_syntax
                else yaml.load(text, Loader=StrictLoader))  # noqa: S506 - a safe loader
    except DuplicateKey as exc:
        at = f" on line {exc.line}, column {exc.column}" if exc.line else ""
        raise InputError(where, f"duplicate key {str(exc.key)!r}{at}") from None
    except json.JSONDecodeError as exc:
        raise InputError(where, f"malformed {kind} at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        raise InputError(where, f"malformed {kind} at {_yaml_where(exc)}") from None
    except RecursionError:
        raise InputError(where, f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    except (ValueError, TypeError, OverflowError) as exc:   # e.g. an unhashable key, a huge number
        raise InputError(where, f"malformed {kind}: {exc}") from None
    check_depth(data, where=where)
    return data


def load_data(path: str | Path, *, max_bytes: int | None = None) -> Any:
    """A YAML file (JSON for ``.json``) as Python data, bounded and strict (see the module):
    at most ``max_bytes`` (default :data:`MAX_YAML_BYTES` for YAML, :data:`MAX_TEXT_BYTES` for JSON)."""
    p = Path(path)
    json_syntax = p.suffix == ".json"
    limit = max_bytes if max_bytes is not None else (MAX_TEXT_BYTES if json_syntax else MAX_YAML_BYTES)
    return parse_text(read_text(p, max_bytes=limit), json_syntax=json_syntax, where=str(p))


def load_mapping(path: str | Path, *, max_bytes: int | None = None) -> dict[str, Any]:
    """:func:`load_data` whose top level must be a mapping."""
    data = load_data(path, max_bytes=max_bytes)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InputError(path, f"the top level must be a mapping (key: value lines), not {kind}")
    return data
