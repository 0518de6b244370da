"""Loading encoders as late-interaction models: plain HF, ColBERT and PyLate layouts."""

import json

import numpy as np
import pytest
import torch
from crossq.config import EncoderConfig
from crossq.encoder import LateInteractionEncoder

from icml26_shared import UserError


def test_plain_encoder_gives_unit_token_vectors(tiny_model):
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(tiny_model), dim=8))
    vecs = enc.encode(["return the path", "a much longer document about files and paths"])
    assert [v.shape[1] for v in vecs] == [32, 32]  # no head: hidden size until a PCA is fitted
    enc.fit_projection(["join two paths", "open a file for reading", "sort a list in place"])
    vecs = enc.encode(["return the path"])
    assert vecs[0].shape[1] == 8
    np.testing.assert_allclose(np.linalg.norm(vecs[0], axis=1), 1.0, rtol=1e-5)


def test_colbert_checkpoint_linear_head(tiny_model, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "colbert"
    shutil.copytree(tiny_model, ckpt)
    w = load_file(str(ckpt / "model.safetensors"))
    w["linear.weight"] = torch.randn(12, 32)
    save_file(w, str(ckpt / "model.safetensors"))
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(ckpt)))
    assert enc.dim == 12 and enc.projection_kind == "checkpoint"
    np.testing.assert_allclose(enc.projection, w["linear.weight"].numpy().T)


def test_pylate_checkpoint_dense_module_and_prefixes(tiny_model, tmp_path):
    import shutil

    from safetensors.torch import save_file

    ckpt = tmp_path / "pylate"
    shutil.copytree(tiny_model, ckpt)
    (ckpt / "1_Dense").mkdir()
    save_file({"linear.weight": torch.randn(10, 32)}, str(ckpt / "1_Dense" / "model.safetensors"))
    (ckpt / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (ckpt / "config_sentence_transformers.json").write_text(
        json.dumps({"query_prefix": "[unused0]", "document_prefix": "[unused1]"}))
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(ckpt)))
    assert enc.dim == 10 and enc.cfg.query_prefix == "[unused0]"
    assert enc.encode(["sort a list"], is_query=True)[0].shape[1] == 10


def test_not_a_model_folder(tmp_path):
    with pytest.raises(UserError, match="not a local Hugging Face model folder"):
        LateInteractionEncoder.load(EncoderConfig(model=str(tmp_path)))


@pytest.mark.slow
def test_minilm_default_encoder():
    enc = LateInteractionEncoder.load(EncoderConfig())
    assert enc.dim == 384 and enc.projection is None
    v = enc.encode(["Return the absolute path."], is_query=True)[0]
    assert v.shape[1] == 384


def _colbert_ckpt(tiny_model, tmp_path, out_dim=12):
    import shutil

    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "colbert-tiny"
    shutil.copytree(tiny_model, ckpt)
    w = load_file(str(ckpt / "model.safetensors"))
    w["linear.weight"] = torch.randn(out_dim, 32, generator=torch.Generator().manual_seed(0))
    save_file(w, str(ckpt / "model.safetensors"))
    return ckpt, w["linear.weight"]


def test_colbert_checkpoint_uses_markers_mask_augmentation_and_skiplist(tiny_model, tmp_path):
    """A ColBERT-shaped checkpoint (BERT + ``linear.weight``) is encoded as ColBERT does:
    queries = [CLS] [unused0] tokens [SEP] then [MASK] up to query_maxlen (not attended, but
    vectors), documents = [CLS] [unused1] tokens [SEP] without punctuation. Checked against the
    model run by hand on exactly those ids."""
    from transformers import AutoModel, AutoTokenizer

    ckpt, W = _colbert_ckpt(tiny_model, tmp_path)
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(ckpt), query_maxlen=10))
    assert enc.colbert and enc.info()["colbert"]
    tok, bert = AutoTokenizer.from_pretrained(ckpt), AutoModel.from_pretrained(ckpt).eval()
    t = tok.convert_tokens_to_ids
    ids = lambda words: [t(w) for w in words]  # noqa: E731

    def by_hand(token_ids, attended, keep):
        with torch.no_grad():
            h = bert(input_ids=torch.tensor([token_ids]),
                     attention_mask=torch.tensor([attended]),
                     token_type_ids=torch.zeros(1, len(token_ids), dtype=torch.long)).last_hidden_state[0]
        v = h[torch.tensor(keep)] @ W.T
        return (v / v.norm(dim=1, keepdim=True)).numpy()

    q = ids(["[CLS]", "[unused0]", "sort", "a", "list", "[SEP]"]) + [tok.mask_token_id] * 4
    got_q = enc.encode(["sort a list"], is_query=True)[0]
    assert got_q.shape == (10, 12)  # always query_maxlen vectors
    np.testing.assert_allclose(got_q, by_hand(q, [1] * 6 + [0] * 4, [True] * 10), rtol=1e-4, atol=1e-5)
    d = ids(["[CLS]", "[unused1]", "sort", ",", "a", "list", ".", "[SEP]"])
    got_d = enc.encode(["sort, a list."], is_query=False)[0]
    keep = [True, True, True, False, True, True, False, True]
    assert got_d.shape == (6, 12)  # two punctuation tokens dropped
    np.testing.assert_allclose(got_d, by_hand(d, [1] * 8, keep), rtol=1e-4, atol=1e-5)


def test_plain_encoder_keeps_its_tokens_as_they_are(tiny_model):
    enc = LateInteractionEncoder.load(EncoderConfig(model=str(tiny_model), dim=8))
    assert not enc.colbert
    assert len(enc.encode(["sort, a list."], is_query=True)[0]) == 7  # [CLS] 5 tokens [SEP]
