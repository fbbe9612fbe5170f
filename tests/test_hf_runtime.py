"""The runner and ``--engine torch`` on a Hugging Face Llama-style toy model (built offline from
a config): loss, gradients and parameters equal the model's own single-process forward and
backward (fp32, rtol 1e-5) on 2 and 4 gloo ranks, with the layer split the table carries."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import make_instance  # noqa: E402

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.executor import lower  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def llama_spec(layers: int = 4):
    from zbsolve.runtime.hf import hf_config
    from zbsolve.runtime.models import hf_spec

    config = hf_config("llama", layers=layers, hidden=32, heads=4, kv_heads=2, intermediate=64,
                       vocab=64, seq=32)
    return hf_spec(config, seq=8, microbatch_size=2)


def table_for(family: str, p: int, v: int, placement: str, split: list[int]):
    inst = make_instance(p=p, m=2 * p, v=v, placement=placement, meta={"split": split})
    return lower(inst, generate(family, inst))


def check(reports, labels, splits):
    assert [r["label"] for r in reports] == labels
    for r, split in zip(reports, splits):
        assert r["ok"], (r["label"], r["max_rel_diff"], r["worst"], r["missing"])
        assert r["max_rel_diff"] <= 1e-5 and not r["missing"]
        assert r["split"] == split


def test_hf_llama_on_2_ranks_ours_and_torch_engine(tmp_path):
    """Also a --module model (tests/own_module_example.py) in the same launch."""
    from zbsolve.runtime.launch import run_jobs
    from zbsolve.runtime.models import spec_from_flags
    from zbsolve.runtime.runner import Job, RunOptions
    from zbsolve.runtime.torch_engine import write_csv_for

    spec = llama_spec().to_dict()
    zbv = table_for("zb-v", 2, 2, "v", [2, 1, 1, 2])
    h1 = table_for("zb-h1", 2, 1, "loop", [2, 4])  # an uneven split the table carries
    csv = str(tmp_path / "h1.csv")
    write_csv_for(h1, csv)
    module = spec_from_flags(module="own_module_example:build").to_dict()
    jobs = [Job(zbv.to_dict(), spec, label="zb-v"), Job(h1.to_dict(), spec, label="zb-h1"),
            Job(h1.to_dict(), spec, engine="torch", torch_csv=csv, label="zb-h1 torch"),
            Job(table_for("zb-h1", 2, 1, "loop", [2, 2]).to_dict(), module, label="module")]
    reports = run_jobs(jobs, 2, RunOptions(steps=2, timeout_s=120))
    check(reports, ["zb-v", "zb-h1", "zb-h1 torch", "module"],
          [[2, 1, 1, 2], [2, 4], [2, 4], [2, 2]])
    # every parameter of the HF model was compared (loss + grads per step, then parameters)
    n_params = 3 + 9 * 4  # embed, norm, head + 9 tensors per decoder layer
    assert all(r["checked"] == 2 * (1 + n_params) + n_params for r in reports[:3])


def test_hf_llama_on_4_ranks():
    from zbsolve.runtime.launch import run_jobs
    from zbsolve.runtime.runner import Job, RunOptions

    spec = llama_spec().to_dict()
    table = table_for("zb-h1", 4, 1, "loop", [2, 1, 1, 2])
    reports = run_jobs([Job(table.to_dict(), spec, label="zb-h1")], 4,
                       RunOptions(steps=2, timeout_s=180))
    check(reports, ["zb-h1"], [[2, 1, 1, 2]])


def test_hf_table_with_too_few_layers_is_refused():
    from zbsolve.runtime.runner import TableMismatch, check_table

    table = table_for("zb-h1", 4, 1, "loop", [1, 1, 1, 1])
    with pytest.raises(TableMismatch, match="covers 4 layers, the model has 6"):
        check_table(table, 4, llama_spec().to_dict())
