"""``slow``: captured SmolLM2-135M Q/K/V (one layer, a 1k-token dev needle document): the
composite estimate's whole-map recall beats random selection and matches or beats A-shape at
density 0.3 (issue 45). Run with ``pytest -m slow``; needs the SmolLM2 weights cached."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_unisparse_recall_on_captured_smollm2_attention():
    import torch

    pytest.importorskip("transformers")
    from unisparse import core
    from unisparse.e2e import documents
    from unisparse.fidelity import capture
    from unisparse.sparse import estimate_block_mask

    from icml26_shared.data import load_smollm2

    torch.set_num_threads(1)
    model, tok = load_smollm2()
    ids = documents(tok, 1024, 1, 0, offset=500, haystack="repeat")[0][0]
    q, k, _v = capture(model.eval(), ids, (8,))[8]
    mass = core.block_attention_mass(q, k, 64)
    recall = {m: float(core.attention_recall(
        q, k, estimate_block_mask(q, k, method=m, block_size=64, density=0.3), 64, mass=mass).mean())
        for m in ("unisparse", "ashape", "random")}
    assert recall["unisparse"] > recall["random"], recall
    assert recall["unisparse"] >= recall["ashape"], recall
