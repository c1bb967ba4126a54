import os
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
import vllm
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.common.cli_args import make_arg_parser
p = make_arg_parser(FlexibleArgumentParser())
flags = sorted(s for s in p._option_string_actions if s.startswith("--"))
print(f"# vLLM {vllm.__version__} `vllm serve` options: every option string the parser accepts (hidden")
print("# backward-compatible --no-enable-x included) of vllm.entrypoints.common.cli_args.make_arg_parser (EngineArgs from vllm/engine/arg_utils.py plus the")
print("# server's), dumped from the installed wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64 (PyPI) by")
print("# tests/data/dump_vllm_flags.py (VLLM_TARGET_DEVICE=cpu, CPU torch); one a line.")
print("\n".join(flags))
