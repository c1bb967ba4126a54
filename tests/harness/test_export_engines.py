"""The exported commands of the seven quickstart tasks against each engine (issue 27 item 1):
vLLM's own argument parser and scheduler/cache config checks when ``vllm`` imports (``.ci/engines``
installs vLLM 0.33.0), and the recorded flag lists of named versions always
(``tests/data/vllm_0.33.0_serve_flags.txt``, ``tests/data/trtllm_serve_00209af_flags.txt``)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import yaml

from harness.servers.export import export_plan

DATA = Path(__file__).parents[1] / "data"
TASKS = ["code-completion", "chat", "rag-qa", "code-review", "summarization", "math-reasoning", "text-to-sql"]


@pytest.fixture(scope="module")
def quickstart_plans(tmp_path_factory) -> Path:
    """``python -m selector deploy`` of the seven quickstart tasks on a6000x8 (--json)."""
    import contextlib
    import io

    from selector.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["deploy", *TASKS, "--json"]) == 0
    path = tmp_path_factory.mktemp("plans") / "plans.json"
    path.write_text(out.getvalue())
    return path


def instances(plan: Path) -> int:
    """Instances the plan set deploys (tasks that reuse one add none)."""
    import json
    return sum(len(p["deployment"]["instances"]) for p in json.loads(plan.read_text())["plans"] if p["deployment"])


def commands(plan: Path, backend: str) -> list[list[str]]:
    """The container commands of the plan's Kubernetes export (``$$`` undone)."""
    text = export_plan(plan, "k8s", gpu="a6000", backend=backend)
    docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    return [[a.replace("$$", "$") for a in d["spec"]["template"]["spec"]["containers"][0]["command"]]
            for d in docs]


def recorded(name: str) -> set[str]:
    lines = (DATA / name).read_text().splitlines()
    return {ln.split()[0] for ln in lines if ln.startswith("--")}


def flags(cmd: list[str]) -> list[str]:
    return [a.split("=")[0] for a in cmd if a.startswith("--")]


@pytest.mark.parametrize("backend, listing", [("vllm", "vllm_0.33.0_serve_flags.txt"),
                                              ("trtllm", "trtllm_serve_00209af_flags.txt")])
def test_every_flag_is_one_the_named_engine_version_takes(quickstart_plans, backend, listing):
    cmds = commands(quickstart_plans, backend)
    assert len(cmds) == instances(quickstart_plans) >= 3       # 7 tasks, some reusing others' instances
    known = recorded(listing)
    for cmd in cmds:
        assert not set(flags(cmd)) - known, cmd
        length = "--max-model-len" if backend == "vllm" else "--max_seq_len"
        assert length in cmd                      # every command bounds its context


def _vllm_available() -> bool:
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("FLOWMAKER_REQUIRE_VLLM"):
            pytest.fail("FLOWMAKER_REQUIRE_VLLM is set but vllm does not import")
        return False
    return True


def test_vllm_commands_pass_vllms_parser_and_config_checks(quickstart_plans, monkeypatch):
    """vLLM's ``vllm serve`` parser, ``EngineArgs.from_cli_args``, ``SchedulerConfig`` (its
    ``verify_max_model_len``: budget vs context without chunked prefill, budget >= max_num_seqs)
    and ``CacheConfig`` on every exported command; the model config (Hugging Face download) is not
    built, so the KV-at-context check is ours (tests/harness/test_export_rules.py)."""
    if not _vllm_available():
        pytest.skip("vllm is not installed (.ci/engines installs vLLM 0.33.0)")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    # EngineArgs resolves the model to a local snapshot when the hub is offline; nothing here loads it
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    parser = make_arg_parser(FlexibleArgumentParser())
    cmds = commands(quickstart_plans, "vllm")
    for cmd in cmds:
        assert cmd[:2] == ["vllm", "serve"]
        args = parser.parse_args(cmd[2:])
        ea = AsyncEngineArgs.from_cli_args(args)
        assert ea.max_model_len == int(cmd[cmd.index("--max-model-len") + 1])
        SchedulerConfig(max_model_len=ea.max_model_len, is_encoder_decoder=False,
                        max_num_batched_tokens=ea.max_num_batched_tokens, max_num_seqs=ea.max_num_seqs,
                        enable_chunked_prefill=bool(ea.enable_chunked_prefill),
                        long_prefill_token_threshold=ea.long_prefill_token_threshold or 0)
        CacheConfig(block_size=ea.block_size, gpu_memory_utilization=ea.gpu_memory_utilization)
    assert len(cmds) == instances(quickstart_plans) >= 3


def test_vllms_check_refuses_what_the_rules_refuse():
    """The rule export_rules.check_budget reproduces is vLLM's: a budget below the context length
    without chunked prefill fails vLLM's SchedulerConfig too."""
    if not _vllm_available():
        pytest.skip("vllm is not installed (.ci/engines installs vLLM 0.33.0)")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.config import SchedulerConfig

    from harness.servers.export_rules import check_budget
    from profiler.engine import EngineConfig
    e = EngineConfig(scheduler="vllm", max_num_batched_tokens=4096)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        check_budget("x", "vllm", e, 8192)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_model_len=8192, is_encoder_decoder=False, max_num_batched_tokens=4096,
                        max_num_seqs=256, enable_chunked_prefill=False)
