"""`python -m experiments.run CONFIG.yaml`: the one entry point for every experiment.

A config names its ``experiment`` (the results folder) and its ``kind``; the kind is a
module ``experiments.kinds.<kind>`` exposing ``Params`` (a pydantic model of the
config's ``params`` mapping) and ``run(params, ctx) -> None``. The runner validates the
config, makes ``results/<experiment>/<run-id>/``, writes the resolved config and
``meta.json`` there, and hands the kind a :class:`RunContext`. Adding an experiment kind
means adding one module; nothing here changes.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from experiments.context import RunContext, UserError, new_run_id, write_meta


class ExperimentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    experiment: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: str = Field(pattern=r"^[a-z0-9_]+$")
    seed: int = 0
    params: dict = Field(default_factory=dict)


def load_config(path: Path) -> ExperimentConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file")
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: malformed YAML: {str(exc).splitlines()[0]}")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: top level must be a mapping")
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise UserError(f"{path}: field '{field}': {err['msg']}")


def kind_module(kind: str):
    try:
        return importlib.import_module(f"experiments.kinds.{kind}")
    except ModuleNotFoundError as exc:
        if exc.name != f"experiments.kinds.{kind}":
            raise
        kinds_dir = Path(__file__).parent / "kinds"
        known = sorted(p.stem for p in kinds_dir.glob("*.py") if not p.stem.startswith("_"))
        raise UserError(f"field 'kind': unknown experiment kind '{kind}'; known: {', '.join(known)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.run", description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results)")
    ap.add_argument("--run-id", default=None, help="reuse a run folder to resume it (default: a new timestamped id)")
    ap.add_argument("--no-progress", action="store_true", help="hide progress bars")
    ap.add_argument("--ray-address", default=None,
                    help="join this Ray cluster for kinds that run on Ray (`runtime: ray`); sets RAY_ADDRESS")
    args = ap.parse_args(argv)
    if args.ray_address:
        os.environ["RAY_ADDRESS"] = args.ray_address
    try:
        cfg = load_config(args.config)
        mod = kind_module(cfg.kind)
        try:
            params = mod.Params.model_validate(cfg.params)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{args.config}: field 'params.{field}': {err['msg']}")
        run_dir = args.results / cfg.experiment / (args.run_id or new_run_id())
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        write_meta(run_dir, seed=cfg.seed, config_path=args.config)
        ctx = RunContext(run_dir=run_dir, seed=cfg.seed, progress=not args.no_progress,
                         config_path=args.config)
        mod.run(params, ctx)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished results are kept; rerun with --run-id to resume", file=sys.stderr)
        return 130
    print(f"results: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
