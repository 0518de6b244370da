"""block_sparse_attention: reference vs float64 dense attention (odd lengths, GQA, causal, masks),
the Triton kernel vs the reference under TRITON_INTERPRET=1, and the GPU lane."""

from __future__ import annotations

import math
import os

import pytest
import torch

from icml26_kernels import block_sparse_attention
from icml26_kernels.block_sparse_attention import indices_to_mask, mask_to_indices, reference

# max abs error vs float64 dense attention (inputs ~N(0,1))
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def dense64(q, k, v, block_mask, block_size, causal, scale=None):
    """Float64 dense attention with the block mask expanded to elements (the slow oracle)."""
    b, h, t, d = q.shape
    s = k.shape[2]
    g = h // k.shape[1]
    kk = k.double().repeat_interleave(g, 1)
    vv = v.double().repeat_interleave(g, 1)
    scale = 1 / math.sqrt(d) if scale is None else scale
    scores = torch.einsum("bhtd,bhsd->bhts", q.double(), kk) * scale
    allowed = block_mask.repeat_interleave(block_size, 2).repeat_interleave(block_size, 3)[:, :, :t, :s]
    if causal:
        allowed = allowed & (torch.arange(s)[None, :] <= torch.arange(t)[:, None] + (s - t))
    scores = scores.masked_fill(~allowed, -math.inf)
    p = torch.softmax(scores, -1).nan_to_num(0.0)
    return p @ vv


def make(b, h, hkv, t, s, d, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=g)
    k = torch.randn(b, hkv, s, d, generator=g)
    v = torch.randn(b, hkv, s, d, generator=g)
    return (x.to(dtype=dtype, device=device) for x in (q, k, v))


def random_mask(b, h, nq, nk, p=0.5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, h, nq, nk, generator=g) < p


@pytest.mark.parametrize("t,s,hkv,causal", [(77, 77, 2, True), (77, 77, 4, False),
                                            (45, 101, 1, True), (100, 37, 2, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_matches_dense64(t, s, hkv, causal, dtype):
    q, k, v = make(2, 4, hkv, t, s, 24, dtype)
    bs = 16
    mask = random_mask(2, 4, math.ceil(t / bs), math.ceil(s / bs))
    out = block_sparse_attention(q, k, v, mask, block_size=bs, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    want = dense64(q, k, v, mask, bs, causal)
    assert (out.double() - want).abs().max().item() <= TOL[dtype]


@pytest.mark.parametrize("causal", [True, False])
def test_all_ones_mask_is_dense_attention(causal):
    q, k, v = make(1, 6, 3, 93, 93, 32)
    ones = torch.ones(1, 1, 3, 3, dtype=torch.bool)  # broadcast over batch and heads
    out = block_sparse_attention(q, k, v, ones, block_size=32, causal=causal)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1),
        is_causal=causal)
    assert (out.double() - want).abs().max().item() < 1e-5


def test_causal_never_sees_the_future():
    q, k, v = make(1, 2, 2, 64, 64, 16)
    ones = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    out = block_sparse_attention(q, k, v, ones, block_size=16, causal=True)
    v2 = v.clone()
    v2[:, :, 40:] = 1e3  # changing future values must not move earlier outputs
    k2 = k.clone()
    k2[:, :, 40:] = -7.0
    out2 = block_sparse_attention(q, k2, v2, ones, block_size=16, causal=True)
    assert torch.equal(out[:, :, :40], out2[:, :, :40])
    assert not torch.allclose(out[:, :, 40:], out2[:, :, 40:])


def test_index_list_equals_mask():
    q, k, v = make(2, 2, 1, 80, 80, 16)
    mask = random_mask(2, 2, 5, 5, p=0.4, seed=3)
    idx, counts = mask_to_indices(mask)
    assert torch.equal(indices_to_mask(idx, 5), mask)
    assert torch.equal(counts, mask.sum(-1))
    a = block_sparse_attention(q, k, v, mask, block_size=16, causal=True)
    b = block_sparse_attention(q, k, v, idx, block_size=16, causal=True)
    assert torch.equal(a, b)


def test_reference_skips_masked_blocks(monkeypatch):
    """The CPU reference touches only kept blocks: poisoning masked key blocks with NaN changes nothing."""
    q, k, v = make(1, 1, 1, 64, 64, 16)
    mask = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 0] = True
    mask[0, 0, 3, 3] = True
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 16:48] = float("nan")
    v2[:, :, 16:48] = float("nan")
    a = block_sparse_attention(q, k, v, mask, block_size=16)
    b = block_sparse_attention(q, k2, v2, mask, block_size=16)
    assert torch.isfinite(b).all() and torch.equal(a, b)


def test_empty_rows_give_zero():
    q, k, v = make(1, 1, 1, 32, 32, 16)
    mask = torch.zeros(1, 1, 2, 2, dtype=torch.bool)
    mask[0, 0, 0, 0] = True
    out = block_sparse_attention(q, k, v, mask, block_size=16)
    assert torch.equal(out[:, :, 16:], torch.zeros_like(out[:, :, 16:]))


@pytest.mark.parametrize("bad", ["heads", "dim", "mask_shape", "block", "dtype"])
def test_bad_input_raises(bad):
    q, k, v = make(1, 4, 2, 32, 32, 16)
    mask = torch.ones(1, 4, 2, 2, dtype=torch.bool)
    kwargs = {"block_size": 16}
    if bad == "heads":
        k, v = k[:, :1].repeat(1, 3, 1, 1), v[:, :1].repeat(1, 3, 1, 1)
    elif bad == "dim":
        k, v = k[..., :8], v[..., :8]
    elif bad == "mask_shape":
        mask = mask[..., :1]
    elif bad == "block":
        kwargs["block_size"] = 24
    elif bad == "dtype":
        q = q.double()
    with pytest.raises((ValueError, TypeError)):
        block_sparse_attention(q, k, v, mask, **kwargs)


# --- interpret lane: the real Triton kernel on CPU --------------------------------------------

needs_interpret = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                     reason="needs TRITON_INTERPRET=1 (set by conftest without CUDA)")


@pytest.mark.interpret
@needs_interpret
@pytest.mark.parametrize("t,s,hkv,causal,bs", [(70, 70, 2, True, 16), (50, 83, 1, False, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_interpreter_matches_reference(monkeypatch, t, s, hkv, causal, bs, dtype):
    pytest.importorskip("triton")
    from icml26_kernels.block_sparse_attention import triton as tri

    q, k, v = make(1, 2, hkv, t, s, 16, dtype)
    mask = random_mask(1, 2, math.ceil(t / bs), math.ceil(s / bs), p=0.6)
    idx, counts = mask_to_indices(mask)
    scale = 1 / 4
    ref = reference.forward(q, k, v, idx, counts, bs, causal, scale)
    got = tri.forward(q, k, v, idx, counts, bs, causal, scale)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert (got.float() - ref.float()).abs().max().item() <= tol
    want = dense64(q, k, v, mask, bs, causal, scale)
    assert (got.double() - want).abs().max().item() <= TOL[dtype]


def hf_layout(b, h, hkv, t, s, d, dtype, seed=0):
    """q, k, v as a Hugging Face attention layer holds them: ``[B, T, H, D]`` transposed to
    ``[B, H, T, D]`` views (token stride ``H·D``), not contiguous copies."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, d, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(b, s, hkv, d, generator=g).to(dtype).transpose(1, 2)
    v = torch.randn(b, s, hkv, d, generator=g).to(dtype).transpose(1, 2)
    return q, k, v


@pytest.mark.interpret
@needs_interpret
@pytest.mark.parametrize("d,bs,dtype,layout", [
    (64, 64, torch.float32, "bhtd"), (128, 64, torch.float32, "hf"), (128, 128, torch.float32, "bhtd"),
    (40, 32, torch.float16, "hf"), (128, 64, torch.float16, "bhtd")])
def test_triton_interpreter_head_dims_dtypes_layouts(d, bs, dtype, layout):
    """The kernel at the head dims models use (64, 128, a non-power-of-two 40), fp32/fp16, blocks
    of 32-128 (fp32 at 128/128 runs the 64-key inner tile) and HF-layout q/k/v. Rows keep several
    key blocks whose maxima differ, so a dropped online-softmax rescale shows. bf16 runs in the
    GPU lane only: the Triton interpreter's bf16 ``tl.dot`` is wrong (Triton 3.x, upstream)."""
    pytest.importorskip("triton")
    from icml26_kernels.block_sparse_attention import triton as tri

    t, s = 3 * bs - 5, 3 * bs - 5
    q, k, v = (hf_layout(1, 2, 1, t, s, d, dtype) if layout == "hf" else make(1, 2, 1, t, s, d, dtype))
    k = k * torch.linspace(0.5, 3.0, s, dtype=dtype)[:, None]  # later keys: larger logits
    mask = torch.ones(1, 2, 3, 3, dtype=torch.bool)
    mask[0, 1, 2, 1] = False
    idx, counts = mask_to_indices(mask)
    scale = 1 / math.sqrt(d)
    got = tri.forward(q, k, v, idx, counts, bs, True, scale)
    want = dense64(q, k, v, mask, bs, True, scale)
    tol = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}[dtype]
    assert (got.double() - want).abs().max().item() <= tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bs", [64, 128])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_launch_config_fits_shared_memory(dtype, bs, d):
    tri = pytest.importorskip("icml26_kernels.block_sparse_attention.triton")
    cfg = tri.launch_config(bs, d, dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    assert tri.smem_bytes(bs, cfg["BLOCK_N"], cfg["BLOCK_D"], elem, cfg["num_stages"]) <= tri.SMEM_BUDGET
    assert bs % cfg["BLOCK_N"] == 0 and cfg["BLOCK_D"] >= d
    if dtype == torch.float32 and bs == 128 and d == 128:  # the case that overflowed 228 KB
        assert cfg["BLOCK_N"] * cfg["num_stages"] <= 64


LONG_SCRIPT = """
import math, torch
from icml26_kernels.block_sparse_attention import triton as tri, reference
BS, D, W = 64, 128, 12288  # W: token stride of a fused [T, 3, H=32, D=128] qkv projection
T = (2**31 // W // BS + 2) * BS  # T * W > 2^31 elements: int32 offsets wrap
buf = torch.empty(T, W, dtype=torch.float16)  # 4.3 GB virtual; only two blocks are written
nq = T // BS
g = torch.Generator().manual_seed(0)
for r in (0, nq - 1):
    buf[r * BS:(r + 1) * BS] = torch.randn(BS, W, generator=g).half()
q, k, v = (buf.as_strided((1, 1, T, D), (T * W, W, W, 1), o) for o in (0, 4096, 8192))
idx = torch.full((1, 1, nq, 2), -1, dtype=torch.int32)
cnt = torch.zeros(1, 1, nq, dtype=torch.int32)
idx[0, 0, -1, 0], idx[0, 0, -1, 1], cnt[0, 0, -1] = 0, nq - 1, 2
out = tri.forward(q, k, v, idx, cnt, BS, True, 1 / math.sqrt(D), first_q_block=nq - 1)
sel = torch.cat([torch.arange(BS), torch.arange(T - BS, T)])
small = [x[:, :, sel].contiguous() for x in (q, k, v)]
ref = reference.forward(*small, torch.tensor([[[[-1, -1], [0, 1]]]]), torch.tensor([[[0, 2]]]),
                        BS, True, 1 / math.sqrt(D))
print("maxerr", float((out[:, :, -BS:].float() - ref[:, :, -BS:].float()).abs().max()))
"""


@pytest.mark.interpret
@needs_interpret
def test_triton_offsets_do_not_wrap_past_2_31_elements():
    """The last query block of a 180k-token prefill in a fused-qkv layout (token stride 12,288):
    row and key offsets pass 2^31 elements. Run in a child process: wrapped int32 offsets read
    outside the buffer and crash it."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    r = subprocess.run([sys.executable, "-c", LONG_SCRIPT], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, f"long-context launch failed (exit {r.returncode}): {r.stderr[-500:]}"
    assert float(r.stdout.split()[-1]) <= 4e-3


@pytest.mark.interpret
@needs_interpret
def test_dispatch_forced_triton_in_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("ICML26_KERNELS", "triton")
    q, k, v = make(1, 2, 2, 40, 40, 16)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    out = block_sparse_attention(q, k, v, mask, block_size=16, causal=True)
    want = dense64(q, k, v, mask.expand(1, 2, 3, 3), 16, True)
    assert (out.double() - want).abs().max().item() < 2e-5


# --- gpu lane ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bs", [64, 128])
def test_gpu_kernel_matches_dense64(dtype, bs):
    t = 1000
    q, k, v = make(2, 8, 2, t, t, 64, dtype, device="cuda")
    n = math.ceil(t / bs)
    mask = random_mask(2, 8, n, n, p=0.5).cuda()
    out = block_sparse_attention(q, k, v, mask, block_size=bs, causal=True)
    want = dense64(q.cpu(), k.cpu(), v.cpu(), mask.cpu(), bs, True)
    # flash-attention's rule: at most ~2x the error of PyTorch's own op at this precision
    assert (out.cpu().double() - want).abs().max().item() <= 2 * TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_kernel_block128_d128_hf_layout(dtype):
    """Llama-sized heads (D 128) at block 128 in HF layout: the launch config must fit shared
    memory (fp32 used to ask for ~320 KB)."""
    t = 1500
    q, k, v = (x.cuda() for x in hf_layout(1, 8, 2, t, t, 128, dtype))
    n = math.ceil(t / 128)
    mask = random_mask(1, 8, n, n, p=0.5).cuda()
    out = block_sparse_attention(q, k, v, mask, block_size=128, causal=True)
    want = dense64(q.cpu(), k.cpu(), v.cpu(), mask.cpu(), 128, True)
    assert (out.cpu().double() - want).abs().max().item() <= 2 * TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_offsets_do_not_wrap_past_2_31_elements():
    """The same long-context case as the interpret lane, on the device (4.3 GB of GPU memory)."""
    import subprocess
    import sys

    script = LONG_SCRIPT.replace("torch.empty(T, W, dtype=torch.float16)",
                                 "torch.empty(T, W, dtype=torch.float16, device='cuda')")
    script = script.replace("torch.randn(BS, W, generator=g).half()",
                            "torch.randn(BS, W, generator=g).half().cuda()")
    script = script.replace("idx = torch.full", "idx = torch.full").replace(
        "out = tri.forward(q, k, v, idx, cnt", "out = tri.forward(q, k, v, idx.cuda(), cnt.cuda()")
    script = script.replace("small = [x[:, :, sel]", "small = [x[:, :, sel.cuda()].cpu()")
    script = script.replace("out[:, :, -BS:].float()", "out[:, :, -BS:].float().cpu()")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    assert float(r.stdout.split()[-1]) <= 4e-3


@pytest.mark.parametrize("threshold", [0, 1 << 30])
def test_reference_paths_agree(monkeypatch, threshold):
    """Both CPU strategies (per-head calls, or one padded call) match float64 dense attention."""
    monkeypatch.setattr(reference, "PER_HEAD_MIN_KEYS", threshold)
    q, k, v = make(2, 4, 2, 150, 150, 16)
    mask = random_mask(2, 4, 10, 10, p=0.5, seed=7)
    out = block_sparse_attention(q, k, v, mask, block_size=16, causal=True)
    assert (out.double() - dense64(q, k, v, mask, 16, True)).abs().max().item() <= TOL[torch.float32]
