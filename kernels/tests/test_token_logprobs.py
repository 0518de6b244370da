"""token_logprobs against a float64 reference, in three lanes:

- reference: the PyTorch path (always);
- interpret: the real Triton kernels on CPU under TRITON_INTERPRET=1;
- gpu: the Triton kernels on CUDA (skipped without a GPU).
"""

from __future__ import annotations

import os

import pytest
import torch

from icml26_kernels import token_logprobs

# (B, T, V): odd sizes, vocabularies that are not powers of two, one larger than a Triton block
SHAPES = [(1, 1, 7), (2, 3, 1001), (3, 5, 4097), (1, 2, 32768 + 17)]
# max abs error vs float64 on the log-probs (we accumulate in fp32 whatever the input dtype)
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-5, torch.float16: 2e-5}
GRAD_TOL = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def _exact(x: torch.Tensor, ids: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    lp = torch.log_softmax(x.double(), dim=-1)
    out = lp.gather(-1, ids.clamp(min=0)[..., None]).squeeze(-1)
    return torch.where(ids == ignore_index, torch.zeros_like(out), out)


def _case(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t, v = shape
    x = (torch.randn(b, t, v, generator=g) * 3).to(dtype).to(device)
    ids = torch.randint(0, v, (b, t), generator=g).to(device)
    if b * t > 2:
        ids[0, 0] = -100  # one ignored position
    return x, ids


def _check(shape, dtype, device):
    x, ids = _case(shape, dtype, device)
    x.requires_grad_(True)
    got = token_logprobs(x, ids)
    assert got.shape == ids.shape and got.dtype == torch.float32
    want = _exact(x.detach(), ids)
    err = (got.double() - want).abs().max().item()
    assert err <= TOL[dtype], f"forward error {err:.3g} for {shape} {dtype}"

    g = torch.Generator().manual_seed(1)
    upstream = torch.randn(ids.shape, generator=g).to(device)
    (dx,) = torch.autograd.grad(got, x, upstream)
    xd = x.detach().double().requires_grad_(True)
    (dx_exact,) = torch.autograd.grad(_exact(xd, ids), xd, upstream.double())
    gerr = (dx.double() - dx_exact).abs().max().item()
    assert dx.dtype == dtype
    assert gerr <= GRAD_TOL[dtype], f"gradient error {gerr:.3g} for {shape} {dtype}"
    if dtype != torch.float32:
        # flash-attention's rule: at most ~2x the error of PyTorch's own op at this precision
        xt = x.detach().clone().requires_grad_(True)
        lp = torch.log_softmax(xt, -1).gather(-1, ids.clamp(min=0)[..., None]).squeeze(-1)
        lp = torch.where(ids == -100, torch.zeros_like(lp), lp)
        (dx_torch,) = torch.autograd.grad(lp, xt, upstream.to(dtype))
        torch_gerr = (dx_torch.double() - dx_exact).abs().max().item()
        assert gerr <= 2 * torch_gerr + 1e-6


@pytest.fixture
def backend(monkeypatch, request):
    monkeypatch.setenv("ICML26_KERNELS", request.param)
    return request.param


@pytest.mark.parametrize("backend", ["reference"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
def test_reference_lane(backend, shape, dtype):
    _check(shape, dtype, "cpu")


@pytest.mark.interpret
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="interpret lane needs TRITON_INTERPRET=1 (set by conftest when no GPU)")
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_interpret_lane(backend, shape, dtype):
    _check(shape, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES + [(4, 512, 151_936)])
def test_gpu_lane(shape, dtype):
    _check(shape, dtype, "cuda")


def test_reference_and_triton_agree_bitwise_close(monkeypatch):
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.fail("neither the interpreter nor a GPU is available: the Triton path is untested")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, ids = _case((2, 4, 3000), torch.float32, device, seed=3)
    monkeypatch.setenv("ICML26_KERNELS", "reference")
    a = token_logprobs(x, ids)
    monkeypatch.setenv("ICML26_KERNELS", "triton")
    b = token_logprobs(x, ids)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_never_materializes_full_vocab_rows_at_once(monkeypatch):
    # the reference processes rows in chunks: with a tiny chunk the result is unchanged
    from icml26_kernels.token_logprobs import reference

    monkeypatch.setenv("ICML26_KERNELS", "reference")
    x, ids = _case((3, 7, 513), torch.float32, "cpu")
    full = token_logprobs(x, ids)
    monkeypatch.setattr(reference, "CHUNK_ELEMS", 513 * 2)
    torch.testing.assert_close(token_logprobs(x, ids), full, atol=0, rtol=0)


def test_ignored_positions_get_zero_and_no_gradient(monkeypatch):
    monkeypatch.setenv("ICML26_KERNELS", "reference")
    x = torch.randn(2, 3, 11, requires_grad=True)
    ids = torch.tensor([[1, -100, 2], [-100, -100, 10]])
    out = token_logprobs(x, ids)
    assert out[0, 1] == 0 and out[1, 0] == 0
    out.sum().backward()
    assert torch.count_nonzero(x.grad[0, 1]) == 0 and torch.count_nonzero(x.grad[1, :2]) == 0


@pytest.mark.parametrize("bad", ["shape", "dtype", "range"])
def test_bad_input_raises(bad):
    x = torch.randn(2, 3, 5)
    ids = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises((ValueError, TypeError, IndexError)):
        if bad == "shape":
            token_logprobs(x, ids[:, :2])
        elif bad == "dtype":
            token_logprobs(x, ids.float())
        else:
            token_logprobs(x, ids + 5)
