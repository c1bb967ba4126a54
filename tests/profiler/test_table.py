"""Table schema, validation, parquet round trip and grid interpolation."""

import numpy as np
import pytest

from profiler.catalog import load_gpus, load_models
from profiler.table import SCHEMA, TableError, build_analytic_table, lookup, read_table, validate_table, write_table

MODELS, GPUS = load_models(), load_gpus()


@pytest.fixture(scope="module")
def table():
    return build_analytic_table([MODELS["llama-3.1-8b"], MODELS["qwen2.5-7b"]], [GPUS["a6000"]],
                                [(1, 1), (2, 1), (8, 1)], [1, 4], [128, 1024], [32, 256])


def test_build_and_roundtrip(table, tmp_path):
    assert list(table.columns) == SCHEMA.names
    # qwen2.5-7b (28 heads) cannot run with tp=8: left out
    assert not ((table.model == "qwen2.5-7b") & (table.tp == 8)).any()
    assert len(table) == (3 + 2) * 8
    assert (table.backend == "analytic").all() and (table.dtype == "bf16").all()
    path = tmp_path / "t.parquet"
    write_table(table, path)
    back = read_table(path)
    assert back.equals(table)


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.drop(columns=["tpot_s"]), "missing column 'tpot_s'"),
    (lambda d: d.assign(ttft_s=-1.0), "'ttft_s' has negative"),
    (lambda d: d.assign(kv_gb=np.nan), "'kv_gb' has NaN"),
    (lambda d: d.assign(batch=d.batch.astype(float)), "'batch' must be integer"),
    (lambda d: d.assign(model=1), "'model' must hold strings"),
    (lambda d: d.assign(batch=1), "duplicate key"),
])
def test_validate_errors(table, mutate, needle):
    with pytest.raises(TableError, match=needle):
        validate_table(mutate(table.copy()))


def test_lookup_on_and_between_grid(table):
    row = table[(table.model == "llama-3.1-8b") & (table.tp == 2) & (table.batch == 4)
                & (table.prompt_tokens == 1024) & (table.output_tokens == 256)].iloc[0]
    on = lookup(table, "llama-3.1-8b", "a6000", 2, 1, 4, 1024, 256)
    assert on["latency_s"] == pytest.approx(row.latency_s)
    lo = lookup(table, "llama-3.1-8b", "a6000", 2, 1, 4, 128, 256)["ttft_s"]
    mid = lookup(table, "llama-3.1-8b", "a6000", 2, 1, 4, 576, 256)["ttft_s"]
    assert mid == pytest.approx((lo + on["ttft_s"]) / 2)
    # clamped outside the grid
    assert lookup(table, "llama-3.1-8b", "a6000", 2, 1, 100, 5000, 256) == \
        lookup(table, "llama-3.1-8b", "a6000", 2, 1, 4, 1024, 256)
    with pytest.raises(KeyError):
        lookup(table, "llama-3.1-8b", "a6000", 4, 1, 1, 128, 32)
