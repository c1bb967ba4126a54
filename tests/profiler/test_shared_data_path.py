"""Shared data from an installed wheel (issue 27 item 5): outside a source checkout the data is
found in ``shared/data`` of the current folder or one above it, and the message when it is not
names where it looked and the variable to set."""
from __future__ import annotations

from pathlib import Path

import profiler.catalog as catalog


def test_an_installed_copy_finds_shared_data_above_the_current_folder(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "lib" / "site-packages"        # no pyproject.toml: not a checkout
    site.mkdir(parents=True)
    monkeypatch.setattr(catalog, "repo_root", lambda: site)
    monkeypatch.delenv(catalog.SHARED_DATA_ENV, raising=False)
    work = tmp_path / "project" / "runs"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    hint = catalog.shared_data_hint()
    assert f"looked in {catalog.shared_data_path()}" in hint and catalog.SHARED_DATA_ENV in hint
    (tmp_path / "project" / "shared" / "data").mkdir(parents=True)
    assert catalog.shared_data_dir() == tmp_path / "project" / "shared" / "data"
    monkeypatch.setenv(catalog.SHARED_DATA_ENV, str(tmp_path / "elsewhere"))
    assert catalog.shared_data_path() == tmp_path / "elsewhere"


def test_a_checkout_keeps_the_folder_next_to_the_repository(monkeypatch):
    monkeypatch.delenv(catalog.SHARED_DATA_ENV, raising=False)
    assert catalog.shared_data_path() == Path(catalog.__file__).resolve().parents[2] / "shared" / "data"
