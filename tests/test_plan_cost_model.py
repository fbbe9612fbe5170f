"""The analytic cost model: FLOPs and bytes per pass, memory, shapes, and its A100 validation."""

from __future__ import annotations

import json

import pytest

from zbsolve.plan import kernels
from zbsolve.plan.accelerators import ACCELERATORS, accelerator
from zbsolve.plan.cost_model import analytic_profile
from zbsolve.plan.memory import MIXED_ADAM, block_bytes_per_token, block_params
from zbsolve.plan.shapes import MoE, ShapeError, family, from_hf_config, shape_from_flags
from zbsolve.plan.validate import ZB_MODELS, error_table, fitted_efficiency, summary
from zbsolve.profiler.analytic import paper_m_b, paper_m_w

LLAMA8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=4096, vocab=128256)


def test_gpt_block_flops_are_the_textbook_counts_split_into_f_i_w():
    h, s, t = 2304, 1024, 6 * 1024.0
    shape = family("gpt", layers=24, hidden=h, heads=24, seq=s, vocab=50257)
    flops = kernels.pass_flops(kernels.decoder_block(shape, t))
    assert flops["F"] == pytest.approx(t * (24 * h * h + 4 * s * h), rel=1e-12)
    assert flops["I"] == pytest.approx(t * (24 * h * h + 8 * s * h), rel=1e-12)
    assert flops["W"] == pytest.approx(t * 24 * h * h, rel=1e-12)


def test_llama_block_flops_with_gqa_swiglu_and_causal_flash_attention():
    shape = family("llama", **LLAMA8B)
    h, kv, f, s, t = 4096, 1024, 14336, 4096, 4096.0
    gemm = t * (2 * h * (h + 2 * kv) + 2 * h * h + 2 * h * 2 * f + 2 * f * h)
    flops = kernels.pass_flops(kernels.decoder_block(shape, t))
    assert flops["F"] == pytest.approx(gemm + 2 * t * s * h, rel=1e-12)
    assert flops["I"] == pytest.approx(gemm + 2.5 * 2 * t * s * h, rel=1e-12)
    assert flops["W"] == pytest.approx(gemm, rel=1e-12)


@pytest.mark.parametrize("name", list(ZB_MODELS))
def test_gpt_activation_memory_is_the_zero_bubble_papers(name):
    model = ZB_MODELS[name]
    m_b, m_w = block_bytes_per_token(model.shape())
    assert m_b == paper_m_b(model.hidden, model.heads, 1024)
    assert m_w == paper_m_w(model.hidden)


def test_llama_activation_memory_counts_gqa_and_swiglu():
    m_b, m_w = block_bytes_per_token(family("llama", **LLAMA8B))
    h, kv, f = 4096, 1024, 14336
    assert m_w == 2 * (6 * h + 2 * kv + 3 * f)  # inputs and output grads of every linear
    assert m_b == 2 * (6 * h + 2 * kv + 3 * f) + 4 * 32  # + fp32 log-sum-exp per head


def test_profile_layers_embedding_blocks_head_and_static_bytes():
    prof = analytic_profile(family("llama", **LLAMA8B), accelerator("h100"), 1)
    assert [l.name for l in prof.layers[:2]] == ["tok_embeddings", "layers.0"]
    assert prof.layers[-1].name == "norm+output" and len(prof) == 34
    emb, block, head = prof.layers[0], prof.layers[1], prof.layers[-1]
    assert emb.I == 0.0 and emb.F > 0 and emb.W > 0  # no input gradient for token ids
    assert emb.params == 2 * 128256 * 4096 and head.params == 2 * (128256 * 4096 + 4096)
    assert block.params == 2 * block_params(family("llama", **LLAMA8B))
    assert block_params(family("llama", **LLAMA8B)) == 4096 * 6144 + 4096 ** 2 + 3 * 4096 * 14336 + 2 * 4096
    assert head.F > 2 * block.F  # a 128k-vocabulary head outweighs two blocks
    assert block.boundary == 2 * 4096 * 4096
    assert MIXED_ADAM.per_param == 18 and MIXED_ADAM.static_bytes(block.params) == 9 * block.params


def test_moe_costs_follow_top_k_and_experts():
    base = dict(layers=4, hidden=1024, heads=8, seq=512, vocab=1000)
    one = family("mixtral", moe=MoE(8, 1, 2048), **base)
    two = family("mixtral", moe=MoE(8, 2, 2048), **base)
    f1 = kernels.pass_flops(kernels.decoder_block(one, 512.0))
    f2 = kernels.pass_flops(kernels.decoder_block(two, 512.0))
    expert_f = 2 * 512 * (1024 * 2 * 2048 + 2048 * 1024)  # one expert pass over all tokens
    assert f2["F"] - f1["F"] == pytest.approx(expert_f, rel=1e-12)
    assert block_params(two) == block_params(one)
    assert block_params(family("mixtral", moe=MoE(16, 2, 2048), **base)) - block_params(two) \
        == 8 * 3 * 1024 * 2048 + 8 * 1024


def test_hf_config_is_read_strictly(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "max_position_embeddings": 8192}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    shape = from_hf_config(path, seq=4096)
    assert (shape.layers, shape.kv_heads, shape.ffn, shape.seq) == (32, 8, 14336, 4096)
    assert shape_from_flags(None, str(path), {"seq": 2048, "layers": 16}).layers == 16
    del cfg["hidden_size"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ShapeError, match="config.json: hidden_size: missing"):
        from_hf_config(path)
    path.write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ShapeError, match="model_type: unsupported 't5'"):
        from_hf_config(path)


def test_model_flags_name_what_is_missing_or_wrong():
    with pytest.raises(ShapeError, match="--vocab: required with --hf llama"):
        shape_from_flags("llama", None, {"layers": 2, "hidden": 64, "heads": 4, "seq": 8})
    with pytest.raises(ShapeError, match="--hf: unknown model family 'bert'"):
        shape_from_flags("bert", None, dict(layers=2, hidden=64, heads=4, seq=8, vocab=10))
    with pytest.raises(ShapeError, match="heads: 5 does not divide hidden 64"):
        family("llama", layers=2, hidden=64, heads=5, seq=8, vocab=10)
    with pytest.raises(ValueError, match="--gpu: unknown accelerator 'v100'"):
        accelerator("v100")


def test_a100_efficiency_is_the_one_fitted_to_the_published_times():
    eta = fitted_efficiency()
    assert 0.72 < eta < 0.73
    assert ACCELERATORS["a100"].efficiency == round(eta, 2)


def test_error_table_against_the_zero_bubble_measurements():
    table = {(r["model"], r["kind"]): r["error"] for r in error_table()}
    expected = {  # (predicted - measured) / measured at eta = 0.73, per model and time kind
        ("1.5B", "T_F"): -0.153, ("1.5B", "T_B"): 0.000, ("1.5B", "T_W"): 0.185,
        ("6.2B", "T_F"): -0.097, ("6.2B", "T_B"): -0.009, ("6.2B", "T_W"): 0.152,
        ("14.6B", "T_F"): -0.107, ("14.6B", "T_B"): -0.039, ("14.6B", "T_W"): 0.080,
        ("28.3B", "T_F"): -0.092, ("28.3B", "T_B"): -0.019, ("28.3B", "T_W"): 0.086,
    }
    for key, err in expected.items():
        assert table[key] == pytest.approx(err, abs=0.001), key
    stats = summary(error_table())
    assert stats["max_abs_error_compute"] < 0.19
    assert stats["mean_abs_error_compute"] < 0.09
