"""torchtitan loads our CSV and layer split through its own builder; the step's gradients equal
the unsplit model's. Needs the titan extra (torchtitan); CPU, 2 gloo ranks."""

from __future__ import annotations

import json
import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan")

from conftest import make_instance  # noqa: E402

from zbsolve.baselines import generate  # noqa: E402
from zbsolve.export.torchtitan import (  # noqa: E402
    cli_overrides,
    fqns_per_stage,
    toml_fragment,
    torchtitan_config,
    write_torchtitan,
)

pytestmark = pytest.mark.torch


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = [  # (family, chunks, placement, split over [embedding, 4 blocks, head])
    ("zb-h1", 1, "loop", [3, 3]),
    ("zb-v", 2, "v", [2, 1, 1, 2]),
]


def test_fqns_follow_the_split_with_llama3_names():
    assert fqns_per_stage([2, 1, 1, 2]) == [["tok_embeddings", "layers.0"], ["layers.1"],
                                            ["layers.2"], ["layers.3", "norm", "lm_head"]]
    assert fqns_per_stage([1, 2], ["emb", "a", "b+c"]) == [["emb"], ["a", "b", "c"]]


def test_schedule_name_matches_our_placement():
    inst = make_instance(p=2, m=4, v=2, placement="v")
    cfg = torchtitan_config(inst, generate("zb-v", inst), [2, 1, 1, 2])
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    loop = make_instance(p=2, m=4, v=2)
    cfg = torchtitan_config(loop, generate("1f1b-interleaved", loop), [2, 1, 1, 2])
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert cfg["training"]["local_batch_size"] == 4
    with pytest.raises(ValueError, match="the schedule has 4"):
        torchtitan_config(loop, generate("1f1b-interleaved", loop), [3, 3])


def test_keys_and_overrides_are_torchtitans_own(tmp_path):
    """Our keys build torchtitan's ParallelismConfig; its CLI parser reads our overrides back."""
    import tyro
    from torchtitan.config import ParallelismConfig
    from torchtitan.config.manager import ConfigManager, custom_registry

    inst = make_instance(p=2, m=4, v=2, placement="v")
    cfg = write_torchtitan(inst, generate("zb-v", inst), [2, 1, 1, 2], tmp_path)
    direct = ParallelismConfig(**cfg["parallelism"])
    ConfigManager()  # registers torchtitan's tyro rules (comma-separated list[str])
    args = cli_overrides({"parallelism": cfg["parallelism"]})
    parsed = tyro.cli(ParallelismConfig, args=[a.replace("--parallelism.", "--") for a in args],
                      registry=custom_registry)
    assert parsed.module_fqns_per_model_part == direct.module_fqns_per_model_part
    assert parsed.pipeline_parallel_schedule_csv == str(tmp_path.resolve() / "schedule.csv")
    assert (tmp_path / "overrides.txt").read_text().split("\n")[:-1] == cli_overrides(cfg)
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in toml_fragment(cfg)
    assert (tmp_path / "command.sh").read_text().count("torchrun --nproc-per-node 2") == 1


def test_torchtitan_builder_runs_our_csv_and_split(tmp_path):
    import titan_ranks
    import torch.multiprocessing as mp

    cases = []
    for k, (family, v, placement, split) in enumerate(CASES):
        inst = make_instance(p=2, m=4, v=v, placement=placement)
        cfg = write_torchtitan(inst, generate(family, inst), split, tmp_path / f"case{k}")
        cases.append({"parallelism": cfg["parallelism"], "n_layers": 4,
                      "local_batch_size": cfg["training"]["local_batch_size"],
                      "placement": list(inst.placement)})
    mp.start_processes(titan_ranks.rank_main, args=(2, _port(), cases, str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for k, case in enumerate(cases):
        # torchtitan placed the stages as our instance does
        for r in range(2):
            assert sorted(ranks[r][k]["stages"]) == [s for s, d in enumerate(case["placement"])
                                                     if d == r]
            assert ranks[r][k]["schedule_class"] == "_PipelineScheduleRuntime"
        model = titan_ranks.build(4)
        tokens, targets = titan_ranks.batch(case["local_batch_size"])
        total = sum(titan_ranks.loss_pair(model(tokens[i:i + 1]), targets[i:i + 1])[0]
                    for i in range(len(tokens)))  # scale_grads=False: sum over microbatches
        total.backward()
        got = {n: g for r in range(2) for n, g in ranks[r][k]["grads"].items()}
        assert set(got) == {n for n, _ in model.named_parameters()}
        losses = [x for r in range(2) for x in ranks[r][k]["losses"]]
        assert sum(losses) == pytest.approx(float(total.detach()), rel=1e-5)
        for n, p in model.named_parameters():
            diff = (torch.tensor(got[n]) - p.grad).abs().max() / p.grad.abs().max()
            assert diff < 1e-5, (k, n, float(diff))


def test_export_says_when_a_torch_builtin_already_reaches_the_schedule(tmp_path):
    from zbsolve.export.stacks import StackExportError, export_torchtitan

    inst = make_instance(p=4, m=8, meta={"split": [2, 1, 1, 2]})
    out = export_torchtitan(inst, generate("1f1b", inst), tmp_path / "a")
    assert out["builtin"]["torch_class"] in ("Schedule1F1B", "ScheduleGPipe")
    assert "no CSV needed" in out["builtin_note"]
    out = export_torchtitan(inst, generate("zb-h1", inst), tmp_path / "b")
    assert out["builtin"] is None and "use the CSV" in out["builtin_note"]
    bare = make_instance(p=4, m=8)
    with pytest.raises(StackExportError, match="carries no layer split"):
        export_torchtitan(bare, generate("zb-h1", bare), tmp_path / "c")
    with pytest.raises(StackExportError, match="expected 4 counts"):
        export_torchtitan(bare, generate("zb-h1", bare), tmp_path / "c", split_text="3,3")
