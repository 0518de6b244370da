"""MiniLM features: 384-d normalised embeddings, cached by content hash (a second call loads no
model); the fine-tuning path on a tiny random-init BERT saved here."""

import json

import numpy as np
import pytest
from nbcg import features
from nbcg.cli import main


def test_content_key_depends_on_every_text_and_the_setting():
    k = features.content_key(["a b", "c"], "m", 128)
    assert k == features.content_key(["a b", "c"], "m", 128)
    assert k != features.content_key(["a", "b c"], "m", 128)      # length-prefixed, no ambiguity
    assert k != features.content_key(["a b", "c"], "m", 64)
    assert k != features.content_key(["a b", "c"], "other", 128)


def test_minilm_embeds_then_reads_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    texts = ["Compute the discrete Fourier transform.", "Fit a linear model with coordinate descent."]
    E = features.embed_minilm(texts)
    assert E.shape == (2, 384) and np.allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    assert len(list((tmp_path / "nbcg" / "embeddings").glob("*.npy"))) == 1

    def boom(*a, **k):
        raise AssertionError("the model must not load on a cache hit")

    real = features._require_minilm
    monkeypatch.setattr(features, "_require_minilm", lambda: (boom, real()[1]))
    assert np.array_equal(features.embed_minilm(texts), E)
    with pytest.raises(AssertionError):            # a different text misses the cache
        features.embed_minilm(texts + ["x"])


def _tiny_bert(path):
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir()
    words = [f"w{j}x{m}" for j in range(24) for m in range(4)] + [f"n{t}" for t in range(400)]
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tok = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    cfg = BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=160)
    import torch

    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_model_dir_fine_tunes_the_encoder(tmp_path, capsys):
    pytest.importorskip("transformers")
    from safetensors.torch import load_file

    bert = _tiny_bert(tmp_path / "bert")
    capsys.readouterr()      # the fixture's own save_pretrained may print a progress bar; nbcg's may not
    data = tmp_path / "d.jsonl"
    assert main(["synth", "--n", "120", "--out", str(data)]) == 0
    assert main(["train", str(data), "--model", str(bert), "--method", "nbcg", "--epochs", "2",
                 "--out", str(tmp_path / "m")]) == 0
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["features"] == "encoder" and len(meta["coalitions"]) > 1
    before = load_file(str(bert / "model.safetensors"))
    after = load_file(str(tmp_path / "m" / "encoder" / "model.safetensors"))
    moved = [k for k in before if k in after and not np.allclose(before[k].numpy(), after[k].numpy())]
    assert moved, "the encoder's weights did not change: it was not fine-tuned"
    assert main(["predict", str(tmp_path / "m"), str(data), "--top-k", "2", "--out", str(tmp_path / "p.jsonl")]) == 0
    preds = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(preds) == 120 and all(len(p["labels"]) == 2 for p in preds)
    err = capsys.readouterr().err
    assert "Loading" not in err and "%|" not in err        # no library progress bars leak
    # full's gradient-share diagnostic on the fine-tuned model: one share per coalition, a distribution
    # that follows the coefficients (a coalition weighted 0 gets no share)
    from nbcg.finetune import EncoderClassifier, encoder_gradient_shares, load_encoder
    from nbcg.io import read_dataset
    from nbcg.pipeline import _matrix

    tok, enc = load_encoder(tmp_path / "m" / "encoder")
    model = EncoderClassifier(enc, meta["hidden"], meta["coalitions"], len(meta["labels"]))
    recs = read_dataset(data)
    Y = _matrix(recs, {x: i for i, x in enumerate(meta["labels"])})
    K = len(meta["coalitions"])
    share = encoder_gradient_shares(model, tok, [r["text"] for r in recs[:40]], Y[:40], meta["coalitions"],
                                    np.ones(K))
    assert share.shape == (K,) and abs(share.sum() - 1) < 1e-6 and (share > 0).all()
    coef = np.ones(K)
    coef[0] = 0.0
    assert encoder_gradient_shares(model, tok, [r["text"] for r in recs[:40]], Y[:40], meta["coalitions"],
                                   coef)[0] == 0.0


def test_st_dir_features_equal_minilm_on_its_own_folder(tmp_path, monkeypatch, capsys):
    """``--features st:DIR`` on the bundled MiniLM folder gives MiniLM's own embeddings and stores
    its folder for predict; a missing folder is one line, exit 2."""
    pytest.importorskip("sentence_transformers")
    from icml26_shared.data import minilm_dir

    monkeypatch.setenv("ICML26_CACHE", str(tmp_path / "cache"))
    texts = ["Compute the discrete Fourier transform.", "Fit a linear model with coordinate descent."]
    kind = f"st:{minilm_dir()}"
    assert np.allclose(features.embed_st(texts, kind), features.embed_minilm(texts), atol=1e-6)
    f = features.Featurizer(kind).fit(texts)
    assert f.state()["kind"] == kind and np.allclose(f.transform(texts), features.embed_minilm(texts))  # cached
    assert main(["synth", "--n", "20", "--out", str(tmp_path / "d.jsonl")]) == 0
    capsys.readouterr()
    assert main(["train", str(tmp_path / "d.jsonl"), "--features", f"st:{tmp_path / 'nope'}",
                 "--out", str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such folder" in err and not (tmp_path / "m2").exists()
