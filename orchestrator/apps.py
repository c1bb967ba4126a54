"""Application specs (``configs/apps/*.yaml``): a template, a base query configuration and the
engines each engine name is bound to."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.engines.base import Engine
from orchestrator.engines.factory import build_instances, load_engine_spec, load_spec, named_yaml
from orchestrator.template import Component, QueryConfig, Template
from profiler.catalog import configs_dir

APP_DIR = configs_dir() / "apps"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineBinding(_Frozen):
    spec: str
    instances: int = Field(1, ge=1)


class AppSpec(_Frozen):
    name: str
    description: str = ""
    engines: dict[str, EngineBinding]
    query: QueryConfig
    doc_tokens_choices: tuple[int, ...] = ()
    components: tuple[Component, ...]
    outputs: tuple[str, ...] = ()

    def template(self) -> Template:
        comps = list(self.components)
        t = comps[0] >> comps[1] if len(comps) > 1 else Template((comps[0],))
        for c in comps[2:]:
            t = t >> c
        return t.named(self.name, outputs=self.outputs)

    def query_configs(self, n: int, rng: np.random.Generator) -> list[QueryConfig]:
        """``n`` configurations: the base one, with the document length drawn from
        ``doc_tokens_choices`` when given."""
        if not self.doc_tokens_choices:
            return [self.query] * n
        picks = rng.choice(np.asarray(self.doc_tokens_choices), size=n)
        return [self.query.model_copy(update={"doc_tokens": int(d)}) for d in picks]

    def build_engines(self, *, prefix_caching: bool = False,
                      overrides: Mapping[str, Sequence[Engine]] | None = None) -> dict[str, list[Engine]]:
        """Fresh simulated instances per engine name; ``overrides`` replaces named ones (e.g. LLM
        instances timed by the profiler, or real engines)."""
        out = {}
        for name, b in self.engines.items():
            if overrides and name in overrides:
                out[name] = list(overrides[name])
            else:
                out[name] = build_instances(load_engine_spec(b.spec), n_instances=b.instances,
                                            prefix_caching=prefix_caching)
        return out


def load_app(name_or_path: str | Path) -> AppSpec:
    """An app by name (``configs/apps/<name>.yaml``) or by ``.yaml`` path, read with the bounded
    reader; an unknown, unreadable or invalid app is a one-line ``SpecError`` (also a KeyError)."""
    return load_spec(named_yaml(name_or_path, APP_DIR, "app"), AppSpec, "app")


def check_apps(names: list[str]) -> list[str]:
    """``names`` when each app loads, with every engine spec it binds (a pydantic validator: an
    experiment fails on a bad app before its first cell); a one-line SpecError otherwise."""
    for name in dict.fromkeys(names):
        for b in load_app(name).engines.values():
            load_engine_spec(b.spec)
    return names


def known_apps() -> list[str]:
    return sorted(q.stem for q in APP_DIR.glob("*.yaml"))
