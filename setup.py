"""Packaging beyond pyproject.toml's metadata: ``configs/`` ships inside the wheel as the package
``flowmaker_configs`` (its folders as subpackages holding only data), found at run time with
``importlib.resources`` (``profiler.catalog.configs_dir``), and ``docs/`` as ``flowmaker_docs``
(the pages help text and messages point to: ``flowmaker.entry.doc``); the declarative ``[tool.setuptools]``
table cannot map a folder under another name next to ``packages.find``."""
from setuptools import find_namespace_packages, find_packages, setup

CODE = ["flowmaker*", "selector*", "solvers*", "profiler*", "harness*", "orchestrator*", "experiments*"]
DATA = ["*.yaml", "*.json", "*.md"]
config_dirs = [f"flowmaker_configs.{p}" for p in find_namespace_packages(where="configs", exclude=["*__pycache__*"])]

setup(
    packages=find_packages(include=CODE) + ["experiments.scripts", "flowmaker_configs", *config_dirs, "flowmaker_docs"],
    package_dir={"flowmaker_configs": "configs", "flowmaker_docs": "docs"},
    package_data={"flowmaker_configs": DATA, **{p: DATA for p in config_dirs}, "flowmaker_docs": ["*.md"],
                  "experiments.scripts": ["*.json", "*.sh"]},
)
