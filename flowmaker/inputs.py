"""Reading user files with bounds: size, text encoding, nesting depth; YAML and JSON with
duplicate keys refused and syntax errors located (line and column).

Every failure is an :class:`InputError` whose message names the file; the caller turns it into
its own one-line error. Bounds: :data:`MAX_YAML_BYTES` per YAML file, :data:`MAX_TEXT_BYTES` per
JSON file (the largest shipped file is ~1 MB), :data:`MAX_DEPTH` levels of nesting (shipped files
use < 10), :data:`MAX_NODES` values after expanding aliases.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_TEXT_BYTES = 64 * 2**20
#: YAML is parsed by libyaml, in pure Python when that fails (~1 s per 2 MB): a smaller bound keeps a parse within seconds;
#: the largest YAML a user makes (a resolved problem of the 125-model catalog) is ~2 MB
MAX_YAML_BYTES = 8 * 2**20
MAX_DEPTH = 100


class InputError(ValueError):
    """A user file cannot be read or parsed: ``path`` and a one-line ``message``;
    ``str(exc)`` is ``"path: message"``."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path, self.message = str(path), message
        super().__init__(f"{path}: {message}" if str(path) else message)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def open_input(path: str | Path):
    """``path`` opened for reading in binary mode, refusing anything but a regular file: a FIFO,
    a device (``/dev/zero``), a socket or a folder is an InputError, found without blocking (the
    file is opened non-blocking and checked with ``fstat``, so a FIFO with no writer never hangs
    and a file swapped for one after a check is still caught). Every reader of a user's file
    goes through here."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(p, "no such file; cannot read it") from None
    except IsADirectoryError:
        raise InputError(p, "is a folder, not a file") from None
    except OSError as exc:
        raise InputError(p, f"cannot read file ({exc.strerror or type(exc).__name__})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(p, "is a folder, not a file")
        if not stat.S_ISREG(mode):
            what = next((name for test, name in _KINDS if test(mode)), "not a plain file")
            raise InputError(p, f"is {what}, not a regular file; refusing to read it")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """At most ``max_bytes`` bytes of the regular file ``path`` (:func:`open_input`); InputError
    for a missing, unreadable, special or larger file (reads ``max_bytes + 1`` at most)."""
    p = Path(path)
    with open_input(p) as fh:
        try:
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


def _no_sexagesimal() -> None:
    """YAML 1.1 reads ``1:30`` as the number 90 (base 60) and ``1e10`` as a string; YAML 1.2 and
    every user mean the opposite, so the strict loader resolves int and float as YAML 1.2 does
    (no base-60 forms; an exponent without a dot or sign is a float)."""
    import re
    resolvers = {k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
                 for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    StrictLoader.yaml_implicit_resolvers = resolvers
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""", re.X),
        list("-+0123456789"))
    StrictLoader.add_implicit_resolver(      # YAML 1.2's floats: 1e10 and 1.0e10 are numbers too
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*|[0-9][0-9_]*(?=[eE]))(?:[eE][-+]?[0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."))


_no_sexagesimal()


class _FastStrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):   # type: ignore[misc]
    """:class:`StrictLoader`'s rules on libyaml's parser (~10x faster; libyaml bounds nesting at
    1000 levels). Only its successes are used: any error is raised again by :class:`StrictLoader`,
    so messages (line, column, wording) stay the pure-Python ones."""


_FastStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_FastStrictLoader.yaml_implicit_resolvers = StrictLoader.yaml_implicit_resolvers


def _load_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 - a safe loader
    except Exception:                    # noqa: BLE001 - the pure-Python loader names the error
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a safe loader


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


def _check_string(s: str, where: str) -> None:
    if "\x00" in s:
        raise InputError(where, f"a NUL character in the text {s[:40]!r}")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(where, f"a lone surrogate (\\u{ord(s[exc.start]):x}) in the text {s[:exc.start]!r}; "
                                "not valid Unicode") from None


def check_depth(data: Any, *, limit: int = MAX_DEPTH, where: str = "") -> None:
    """InputError when ``data`` nests lists and mappings deeper than ``limit``, refers to itself
    (a recursive YAML alias), or expands to more than :data:`MAX_NODES` values (aliases counted
    at every use). Recursion is bounded by ``limit``; a shared value is walked once."""
    memo: dict[int, tuple[int, int]] = {}   # id -> (expanded size, height)
    on_path: set[int] = set()

    def walk(obj: Any, depth: int) -> tuple[int, int]:
        if isinstance(obj, str):
            _check_string(obj, where)
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
            for k in (obj if isinstance(obj, dict) else ()):
                if isinstance(k, str):
                    _check_string(k, where)
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
                else _load_yaml(text))
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


def validate_strict(model: Any, data: Any) -> Any:
    """``model`` (a pydantic model class) from parsed ``data`` under pydantic's strict JSON rules:
    a number is never read from ``true`` or ``"5"``, nor a string from a number, while lists still
    fill tuples (JSON has only arrays). Raises pydantic's ValidationError. Non-JSON values
    (a YAML date) pass as their text."""
    return model.model_validate_json(json.dumps(data, default=str), strict=True)


def _inner_model(tp: Any) -> tuple[Any, bool]:
    """The pydantic model inside annotation ``tp`` (``list[M]``, ``M | None``, ``dict[str, M]``)
    and whether a mapping key comes before it; (None, False) when there is none."""
    from typing import get_args, get_origin

    from pydantic import BaseModel
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, False
    for arg in get_args(tp):
        model, keyed = _inner_model(arg)
        if model is not None:
            return model, keyed or get_origin(tp) is dict
    return None, False


def known_keys(model: Any, loc: tuple) -> list[str]:
    """The field names of the model found at ``loc`` (a pydantic error location without its last
    part) below ``model``; [] when the location leaves the models."""
    keyed = False
    for part in loc:
        if isinstance(part, int) or part == "[key]":
            continue
        if keyed:                 # a mapping's key, e.g. `models.<name>`
            keyed = False
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model, keyed = _inner_model(field.annotation)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def error_message(err: dict, model: Any = None) -> str:
    """The message of one pydantic error ``err``: an unknown key names the closest known field of
    ``model`` at its location (``unknown field; did you mean 'description'?``)."""
    import difflib
    if err["type"] == "extra_forbidden":
        loc = tuple(err["loc"])
        close = difflib.get_close_matches(str(loc[-1]), known_keys(model, loc[:-1]), n=1, cutoff=0.6) \
            if model is not None and loc else []
        return "unknown field" + (f"; did you mean '{close[0]}'?" if close else "")
    return err["msg"].removeprefix("Value error, ")


def main_error(exc: Any) -> dict:
    """The error of a pydantic ValidationError to report: an unknown key first (a misspelt
    required key also reads as missing: the unknown key names the fix), else the first."""
    errors = exc.errors()
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
