"""`python -m experiments.run CONFIG.yaml`: the one entry point for every experiment.

A config names its ``experiment`` (the results folder) and its ``kind``; the kind is a
module ``experiments.kinds.<kind>`` exposing ``Params`` (a pydantic model of the
config's ``params`` mapping) and ``run(params, ctx) -> None``. The runner validates the
config, makes ``results/<experiment>/<run-id>/``, writes the resolved config and
``meta.json`` there, and hands the kind a :class:`RunContext`; when the kind returns it adds the
run's measured ``wall_s`` and ``cpu_s`` (from ``main``'s start: report writing and publishing
included, Python's start-up and imports of about 1 s not) and the load average to ``meta.json``. Adding an experiment kind
means adding one module; nothing here changes.

Results never mix: a new run gets a fresh id (UTC timestamp plus random hex) and a folder
created exclusively; ``--run-id`` resumes a folder (finished cells are skipped) only if the
config's hash equals the one in its ``meta.json`` (``--force`` overrides, and the earlier
config is kept beside the new one); a folder that holds cells but neither ``meta.json`` nor
``config.yaml`` is resumed only with ``--force``; a run folder is locked while a process runs
in it (a second one on the same run id is refused, exit status 2); run ids are single folder
names inside ``--results``; a duplicate key anywhere in the config is an error. Ctrl-C stops
with exit status 130, SIGTERM with 143 (one line each), keeping the finished cells.

Where cells run (``experiments.executor``) is the config's top-level ``runtime`` (``local``
worker processes or ``ray``) and ``workers``, overridden by ``--runtime``, ``--workers`` and
``--ray-address``; they are not part of the config hash (the tables do not depend on them).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from flowmaker.entry import UserError, command_name
from flowmaker.inputs import error_message, main_error, validate_strict
from flowmaker.names import name_problem
from experiments.context import (EXECUTION_KEYS, Execution, RunContext, RunLock, check_finite,
                                 config_hash, finish_meta, open_run_dir, write_meta)


class ExperimentConfig(Execution):
    """An experiment config: what to run (``experiment``, ``kind``, ``seed``, ``params``) and
    where its cells run (the :class:`~experiments.context.Execution` keys)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    experiment: str
    kind: str = Field(pattern=r"^[a-z0-9][a-z0-9_]*$")    # never a private module (_plotstyle, __init__)
    seed: int = 0
    params: dict = Field(default_factory=dict)

    @field_validator("experiment")
    @classmethod
    def _folder_name(cls, v: str) -> str:
        why = name_problem(v)      # the results folder's name: one safe path component
        if why:
            raise ValueError(why)
        return v


def config_file(name_or_path: str | Path) -> Path:
    """An experiment config by name (``configs/experiments/<name>.yaml``) or by path."""
    from profiler.catalog import CatalogError, config_path
    try:
        path = config_path(name_or_path, "experiments", "experiment config")
    except CatalogError as exc:
        raise UserError(str(exc)) from None
    if not path.is_file():
        raise UserError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    return path


def load_config(path: Path) -> ExperimentConfig:
    """Read and validate an experiment config; a duplicate key (at any depth) is a UserError."""
    from selector.errors import ProblemError
    from selector.yamlio import load_mapping
    path = config_file(path)
    try:
        raw = load_mapping(path)
    except ProblemError as exc:
        raise UserError(str(exc) if exc.field == str(path) else f"{path}: {exc}") from None
    try:
        return validate_strict(ExperimentConfig, raw)
    except ValidationError as exc:
        err = main_error(exc)
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise UserError(f"{path}: field '{field}': {error_message(err, ExperimentConfig)}")


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
    from flowmaker.entry import (OneLineParser, add_version, one_line, setup_logging, show_progress,
                                 signalled)
    from flowmaker.inputs import InputError
    from profiler.catalog import CatalogError
    from selector.errors import ProblemError
    t0, c0 = time.perf_counter(), _cpu_s()     # Python's start-up and this module's imports come before
    setup_logging()
    ap = OneLineParser(prog=command_name("experiments.run"), description=__doc__.splitlines()[0])
    add_version(ap)
    ap.add_argument("config", help="experiment name in configs/experiments (e.g. quickstart) or a config file")
    ap.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results)")
    ap.add_argument("--run-id", default=None,
                    help="resume this run folder (same config only) or start one of this name; default: a new "
                         "unique id YYYYmmddTHHMMSSZ-<hex>")
    ap.add_argument("--force", action="store_true",
                    help="resume --run-id even though its config differs (its cells then mix)")
    ap.add_argument("--no-progress", action="store_true",
                    help="hide progress bars (they are drawn only when standard error is a terminal)")
    ap.add_argument("--runtime", choices=["local", "ray"], default=None,
                    help="where cells run: local worker processes or Ray tasks (default: the config's "
                         "`runtime`, else local)")
    ap.add_argument("--workers", type=_positive_int, default=None,
                    help="local: worker processes (1: this process); ray: cells in flight (default: the config's)")
    ap.add_argument("--ray-address", default=None,
                    help="join this Ray cluster (implies --runtime ray; sets RAY_ADDRESS for kinds that start "
                         "Ray actors themselves)")
    args = ap.parse_args(argv)
    if args.ray_address:
        os.environ["RAY_ADDRESS"] = args.ray_address
    run_dir: Path | None = None
    lock: RunLock | None = None
    try:
        args.config = config_file(args.config)
        cfg = _with_overrides(load_config(args.config), args)
        check_finite(cfg.params, "params")
        mod = kind_module(cfg.kind)
        try:
            params = validate_strict(mod.Params, cfg.params)
        except ValidationError as exc:
            err = main_error(exc)
            field = ".".join(["params", *(str(p) for p in err["loc"])])
            raise UserError(f"{args.config}: field '{field}': {error_message(err, mod.Params)}")
        check_finite(params.model_dump(), "params")
        dump = cfg.model_dump(mode="json")
        config = {k: dump[k] for k in ("experiment", "kind", "seed", "params", *EXECUTION_KEYS)}
        try:
            run_dir, old_hash = open_run_dir(args.results, cfg.experiment, args.run_id, config, force=args.force)
            lock = RunLock(run_dir)
        except OSError as exc:
            raise UserError(f"--results {args.results}: cannot make the run folder ({exc.strerror or exc})") from None
        new_hash = config_hash(config)
        if old_hash is not None and old_hash != new_hash and (run_dir / "config.yaml").exists():
            os.replace(run_dir / "config.yaml", run_dir / f"config.{old_hash[:12]}.yaml")   # --force: keep both
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        extra = {"config_sha256": new_hash}
        if old_hash is not None and old_hash != new_hash:
            extra["forced_over_config_sha256"] = old_hash
        write_meta(run_dir, seed=cfg.seed, config_path=args.config, extra=extra)
        ctx = RunContext(run_dir=run_dir, seed=cfg.seed, progress=show_progress(args.no_progress),
                         config_path=args.config, execution=Execution.model_validate(
                             {k: getattr(cfg, k) for k in EXECUTION_KEYS}))
        mod.run(params, ctx)
        wall_s = time.perf_counter() - t0
        finish_meta(run_dir, wall_s=wall_s, cpu_s=_cpu_s() - c0)
    except (UserError, ProblemError, CatalogError, InputError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return _interrupted(exc, run_dir)
    except Exception:
        # an interrupt that landed inside a C extension (its import) surfaces as another exception
        if (sig := signalled()) is None:
            raise
        return _interrupted(sig, run_dir)
    finally:
        if lock is not None:
            lock.release()
    print(f"results: {run_dir} (wall time {wall_s:.1f} s, load average {_load()})")
    return 0


def _interrupted(exc: KeyboardInterrupt, run_dir: Path | None) -> int:
    """Ctrl-C or SIGTERM: one line saying how to resume, and the signal's exit status."""
    from flowmaker.entry import interrupt_status, interrupt_word
    where = f"; rerun with --run-id {run_dir.name} to resume" if run_dir is not None else ""
    print(f"{interrupt_word(exc)}: finished results are kept{where}", file=sys.stderr)
    return interrupt_status(exc)


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return n


def _with_overrides(cfg: ExperimentConfig, args) -> ExperimentConfig:
    """The config with ``--runtime``, ``--workers`` and ``--ray-address`` applied (the last implies Ray)."""
    update = {"runtime": args.runtime, "workers": args.workers, "ray_address": args.ray_address}
    update = {k: v for k, v in update.items() if v is not None}
    if args.ray_address:
        update["runtime"] = "ray"
    return cfg.model_copy(update=update)


def console():
    """The ``flowmaker-experiment`` console script and ``python -m experiments.run``."""
    from flowmaker.entry import run
    run(main)


if __name__ == "__main__":
    console()
