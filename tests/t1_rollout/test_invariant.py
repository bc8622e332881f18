"""The batch-invariant kernels of the embedded engine: a row's value does not depend on its neighbours."""

import threading

import pytest
import torch
import torch.nn.functional as F

from t1_rollout.engine.invariant import (
    BatchInvariantMode,
    invariant_elementwise,
    invariant_grouped_mm,
    invariant_linear,
    invariant_sdpa,
)

# (out_features, in_features) of every linear of the tiny Qwen3.5-MoE: projections, router, experts,
# shared expert and its one-output gate, and the LM head over the Qwen3.5 vocabulary.
SHAPES = [(128, 64), (64, 64), (4, 64), (8, 64), (32, 64), (64, 32), (1, 64), (248320, 64)]


@pytest.fixture(autouse=True)
def one_thread():
    """The invariance is claimed for one torch thread (the engine's default)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_linear_row_is_the_same_among_any_rows(shape):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(shape, generator=g)
    row = torch.randn(shape[1], generator=g)
    alone = invariant_linear(row[None], weight)[0]
    for m in [*range(1, 41), 64]:
        for pos in sorted({0, m // 2, m - 1}):
            rows = torch.randn(m, shape[1], generator=g) * 3
            rows[pos] = row
            assert torch.equal(invariant_linear(rows, weight)[pos], alone), (m, pos)
    torch.testing.assert_close(alone, weight @ row, rtol=1e-5, atol=1e-5)  # still the product


def test_plain_linear_is_not_row_invariant_on_this_blas():
    """What the helper is for: torch's own one-row and two-row sgemm round a row differently."""
    g = torch.Generator().manual_seed(1)
    weight, rows = torch.randn(248320, 64, generator=g), torch.randn(4, 64, generator=g)
    one, two, four = F.linear(rows[:1], weight)[0], F.linear(rows[:2], weight)[0], F.linear(rows, weight)[0]
    if torch.equal(one, four) and torch.equal(two, four):
        pytest.skip("this BLAS already reduces a row the same way for 1, 2 and 4 rows")
    assert torch.equal(invariant_linear(rows[:1], weight)[0], invariant_linear(rows, weight)[0])


def test_linear_keeps_leading_dims_and_bias():
    x, w, b = torch.randn(3, 1, 64), torch.randn(32, 64), torch.randn(32)
    out = invariant_linear(x, w, b)
    assert out.shape == (3, 1, 32)
    torch.testing.assert_close(out, x @ w.T + b)
    assert invariant_linear(torch.randn(0, 64), w).shape == (0, 32)


def test_grouped_mm_is_each_group_through_the_linear():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(7, 64, generator=g), torch.randn(4, 64, 32, generator=g)
    offs = torch.tensor([2, 2, 5, 6], dtype=torch.int32)  # group 1 empty, row 6 past the last group
    out = invariant_grouped_mm(a, b, offs=offs)
    for e, (lo, hi) in enumerate([(0, 2), (2, 2), (2, 5), (5, 6)]):
        assert torch.equal(out[lo:hi], invariant_linear(a[lo:hi], b[e].T))
    assert torch.equal(out[6], torch.zeros(32))
    torch.testing.assert_close(out[:6], torch._grouped_mm(a[:6], b, offs=offs))
    with pytest.raises(ValueError, match="offs"):
        invariant_grouped_mm(a, b)


@pytest.mark.parametrize(
    "func", [torch.exp, torch.Tensor.sigmoid, F.silu, F.softplus, torch.rsqrt, torch.cos]
)
def test_elementwise_value_does_not_depend_on_its_place(func):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, generator=g) * 4 - 2 + 2.5  # positive: rsqrt defined
    alone = invariant_elementwise(func, x)
    for n in (1, 7, 8, 16, 31, 32, 33, 64, 100):
        batch = torch.rand(n, 4, generator=g) + 0.5
        batch[n // 2] = x
        assert torch.equal(invariant_elementwise(func, batch)[n // 2], alone), n
        strided = batch.T.contiguous().T  # same values, column-major
        assert torch.equal(invariant_elementwise(func, strided)[n // 2], alone), n
    torch.testing.assert_close(alone, func(x))


def test_elementwise_in_place_writes_back():
    x = torch.randn(5, 3)
    y = x.clone()
    assert invariant_elementwise(F.silu, y, inplace=True) is y
    assert torch.equal(y, invariant_elementwise(F.silu, x))


def test_attention_of_a_left_padded_row_is_its_lone_call():
    """Each row of a masked batch is attended as the unmasked lone sequence is, packed heads unpacked."""
    g = torch.Generator().manual_seed(4)
    lengths, width, heads, kv_heads, dim = [7, 3, 5], 7, 4, 2, 16
    keys = [torch.randn(1, kv_heads, n, dim, generator=g) for n in lengths]
    values = [torch.randn(1, kv_heads, n, dim, generator=g) for n in lengths]
    queries = [torch.randn(1, heads, 1, dim, generator=g) for _ in lengths]
    lone = [
        F.scaled_dot_product_attention(q, k, v, scale=0.25, is_causal=False, enable_gqa=True)
        for q, k, v in zip(queries, keys, values, strict=True)
    ]
    k_b = torch.cat([F.pad(k, (0, 0, width - k.shape[2], 0)) for k in keys])
    v_b = torch.cat([F.pad(v, (0, 0, width - v.shape[2], 0)) for v in values])
    mask = torch.stack([torch.arange(width) >= width - n for n in lengths])[:, None, None, :]
    q_packed = torch.cat(queries).reshape(len(lengths), kv_heads, heads // kv_heads, dim)  # transformers'
    out = invariant_sdpa(q_packed, k_b, v_b, attn_mask=mask, dropout_p=0.0, scale=0.25, is_causal=False)
    for b, expected in enumerate(lone):
        assert torch.equal(out[b].reshape(heads, 1, dim), expected[0])
    float_mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    out = invariant_sdpa(torch.cat(queries), k_b, v_b, float_mask, scale=0.25, enable_gqa=True)
    for b, expected in enumerate(lone):
        assert torch.equal(out[b : b + 1], expected)


def test_attention_with_a_hole_in_the_mask_keeps_the_mask():
    q, k, v = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.tensor([[True, False, True, True, True], [True] * 5])[:, None, None, :]
    torch.testing.assert_close(
        invariant_sdpa(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )


def test_mode_routes_on_its_own_thread_only():
    """The trainer's forwards on other threads keep torch's kernels while the engine holds the mode."""
    held, release = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def engine_thread():
        with BatchInvariantMode():
            seen["engine"] = torch._C._len_torch_function_stack()
            held.set()
            release.wait(10)

    worker = threading.Thread(target=engine_thread)
    worker.start()
    assert held.wait(10)
    seen["other"] = torch._C._len_torch_function_stack()
    release.set()
    worker.join()
    assert seen == {"engine": 1, "other": 0}
    layer, x = torch.nn.Linear(64, 8, bias=False).requires_grad_(False), torch.randn(1, 64)
    with BatchInvariantMode():
        assert torch.equal(layer(x), invariant_linear(x, layer.weight))
