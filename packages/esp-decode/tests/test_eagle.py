"""EAGLE-2 (the upper reference): an EAGLE-layout head saved and loaded by path, the same verifier
(lossless, budget, >= 1 token a call), the dynamic tree against a path-by-path brute force, a head
that only works when it reads the target's features, and bad folders."""

import json

import numpy as np
import pytest
import torch
from esp_decode.baselines import make_drafter
from esp_decode.config import Eagle2Config
from esp_decode.decode import generate
from esp_decode.eagle import Eagle2Drafter, load_head, new_head, save_head

from icml26_shared import UserError

PROMPTS = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8], [3, 4] * 6 + [5]]


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, tiny_llama):
    path = tmp_path_factory.mktemp("eagle-head")
    save_head(new_head(tiny_llama, seed=0), path)
    return path


def test_saved_layout_is_eagles_and_loads_by_path(head_dir, tiny_llama):
    from safetensors.torch import load_file

    keys = set(load_file(str(head_dir / "model.safetensors")))
    assert {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.post_attention_layernorm.weight",
            "layers.0.mlp.gate_proj.weight"} <= keys
    assert "layers.0.input_layernorm.weight" not in keys          # EAGLE's layer 0 has no input norm
    assert load_file(str(head_dir / "model.safetensors"))["fc.weight"].shape == (32, 64)   # 2d -> d
    head = load_head(head_dir)
    for (k, v), (k2, v2) in zip(new_head(tiny_llama, seed=0).state_dict().items(), head.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2)
    assert json.loads((head_dir / "config.json").read_text())["num_hidden_layers"] == 1


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_eagle2_equals_greedy_batch_1_and_3_within_budget(tmp_path, tiny_models, arch, greedy):
    model = tiny_models[arch]
    save_head(new_head(model, seed=1), tmp_path)
    refs = [greedy(model, p, 16) for p in PROMPTS]
    for cfg in (Eagle2Config(), Eagle2Config(depth=3, top_k=3, max_nodes=7)):
        dr = make_drafter("eagle2", eagle_path=tmp_path, eagle2=cfg)
        new, stats = generate(model, PROMPTS, dr, 16)
        assert new == refs, (arch, cfg)
        assert generate(model, [PROMPTS[1]], make_drafter("eagle2", eagle_path=tmp_path, eagle2=cfg), 16)[0][0] == refs[1]
        for st in stats:
            assert all(a >= 1 for a in st["accepted_lengths"])       # each call accepts >= 1 token
            assert max(st["tree_sizes"]) <= cfg.max_nodes
            assert st["tree_sizes"][0] == 0 and max(st["tree_sizes"]) > 0   # prefill, then real trees


def _path_logp(head, model, kv, P, h_root, path):
    """Draft log-probs after ``path`` (tokens under the bonus), computed one item at a time with a
    plain causal cache: no tree mask, no batching of siblings."""
    emb, lm = model.get_input_embeddings(), model.get_output_embeddings()
    h, past = h_root, kv
    for j, tok in enumerate(path):
        out, past = head(emb(torch.tensor([[tok]])), h[None, None], torch.tensor([[P + j]]), past)
        h = out[0, 0]
    return torch.log_softmax(lm(h).float(), -1)


def test_dynamic_tree_equals_a_path_by_path_brute_force(distilled):
    """Level 1 = top-k of the bonus; each level expands the top-k newest nodes by path score (sum of
    log-probs); the tree = the ``max_nodes`` best of all drafted nodes by path score."""
    model, head, _ = distilled
    K, levels, N = 3, 4, 25   # 30 drafted: all of levels 1-3 but 1, 4 of level 4
    dr = Eagle2Drafter(head, Eagle2Config(depth=levels, top_k=K, max_nodes=N))
    seen = []
    orig = dr.expand

    def spy(b, h_root, lv):
        state = (dr.kv[b], dr.length[b], h_root.clone())
        tree = orig(b, h_root, lv)
        seen.append((state, tree))
        return tree

    dr.expand = spy
    generate(model, [[5, 17, 99, 3, 250, 42, 7, 8]], dr, 8)
    assert len(seen) >= 2
    with torch.no_grad():
        for (kv, P, h_root), tree in seen[:2]:
            cands = {}                                         # path -> score
            logp = _path_logp(head, model, kv, P, h_root, [])
            top = torch.topk(logp, K)
            frontier = [((t,), s) for t, s in zip(top.indices.tolist(), top.values.tolist(), strict=True)]
            cands.update(frontier)
            for _ in range(1, levels):
                children = []
                for path, score in frontier:
                    top = torch.topk(_path_logp(head, model, kv, P, h_root, list(path)), K)
                    children += [((*path, t), score + s) for t, s in zip(top.indices.tolist(), top.values.tolist(),
                                                                          strict=True)]
                cands.update(children)
                frontier = sorted(children, key=lambda x: -x[1])[:K]
            ranked = sorted(cands.items(), key=lambda x: -x[1])
            best = ranked[:N]
            assert ranked[N - 1][1] - ranked[N][1] > 1e-3   # a well-posed case: no tie at the cut
            got = {tuple(tree.path(i)): tree.scores[i] for i in range(len(tree))}
            assert len(tree) == N and set(got) == {p for p, _ in best}
            for p, s in best:
                assert np.log(got[p]) == pytest.approx(s, abs=1e-4)
            for i in range(len(tree)):                         # ancestor-closed, no duplicate siblings
                assert tree.parents[i] < i
                assert tree.child(tree.parents[i], tree.tokens[i]) == i


class _Blind(Eagle2Drafter):
    """The same head fed zero target features."""

    def observe(self, b, rec):
        super().observe(b, rec)
        self.pending[b] = torch.zeros_like(self.pending[b])


def _train_head(model, steps=40, seed=0):
    """A head distilled for ``steps`` AdamW steps on the target's own greedy text and features
    (EAGLE's losses: smooth-L1 on the next feature + 0.1 x cross-entropy to the target's next token)."""
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    prompts = [torch.randint(1, V, (8,), generator=g).tolist() for _ in range(16)]
    new, _ = generate(model, prompts, make_drafter("ar"), 32)
    seq = torch.tensor([p + n for p, n in zip(prompts, new, strict=True)])
    with torch.no_grad():
        feats = model.model(seq).last_hidden_state
        target = torch.softmax(model.lm_head(feats), -1)
        emb = model.get_input_embeddings()(seq)
    head = new_head(model, seed=seed).train()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    pos = torch.arange(seq.shape[1] - 1)[None].expand(seq.shape[0], -1)
    for _ in range(steps):
        h, _ = head(emb[:, 1:], feats[:, :-1], pos)
        ce = -(target[:, 1:] * torch.log_softmax(model.lm_head(h), -1)).sum(-1).mean()
        loss = torch.nn.functional.smooth_l1_loss(h, feats[:, 1:]) + 0.1 * ce
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval(), g


@pytest.fixture(scope="module")
def distilled(make_tiny):
    """A 256-token tiny target and a head distilled on its features (peaked drafts)."""
    model = make_tiny("llama", vocab=256, seed=0)
    head, g = _train_head(model)
    return model, head, g


def test_the_drafter_uses_the_targets_features(distilled, greedy, tmp_path):
    """A head distilled on the target's features drafts well (mean accepted length clearly > 1,
    output still greedy); the same head fed zero features, and an untrained head, do not."""
    model, head, g = distilled
    save_head(head, tmp_path)
    head = load_head(tmp_path)                                # through the EAGLE layout on disk
    prompts = [torch.randint(1, 256, (8,), generator=g).tolist() for _ in range(6)]
    refs = [greedy(model, p, 24) for p in prompts]
    cfg = Eagle2Config(depth=4, top_k=2, max_nodes=6)
    mal = {}
    for name, dr in (("features", Eagle2Drafter(head, cfg)), ("zero", _Blind(head, cfg)),
                     ("untrained", Eagle2Drafter(new_head(model, seed=5), cfg))):
        new, st = generate(model, prompts, dr, 24)
        assert new == refs, name
        mal[name] = float(np.mean([s["mean_accepted_length"] for s in st]))
    assert mal["features"] > 1.3 and mal["features"] > mal["zero"] + 0.25 and mal["features"] > mal["untrained"] + 0.25, mal


def test_a_pre_filled_cache_is_refused(tiny_llama):
    from esp_decode.smol import prefill

    dr = Eagle2Drafter(new_head(tiny_llama))
    with pytest.raises(UserError, match="features of every prompt token"):
        generate(tiny_llama, [PROMPTS[0]], dr, 4, cache=prefill(tiny_llama, PROMPTS[0]))


def _bad_folders(root, tiny_llama, make_tiny):
    """(folder, expected message) pairs; the last two load and fail only against the target."""
    good = root / "good"
    save_head(new_head(tiny_llama), good)
    cases = [(root / "missing", "no such EAGLE checkpoint folder")]
    d = root / "noconfig"
    d.mkdir()
    cases.append((d, "no config.json"))
    d = root / "badjson"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    cases.append((d, "malformed JSON"))
    d = root / "noweights"
    d.mkdir()
    (d / "config.json").write_text((good / "config.json").read_text())
    cases.append((d, "no model.safetensors or pytorch_model.bin"))
    d = root / "garbage"
    d.mkdir()
    (d / "config.json").write_text((good / "config.json").read_text())
    (d / "model.safetensors").write_bytes(b"not a safetensors file")
    cases.append((d, "cannot read the weights"))
    d = root / "shape"
    d.mkdir()
    cfg = json.loads((good / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 48}))
    (d / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    cases.append((d, "do not fit"))
    d = root / "eagle3"
    d.mkdir()
    (d / "config.json").write_text((good / "config.json").read_text())
    torch.save({"midlayer.q_proj.weight": torch.zeros(2, 2), "fc.weight": torch.zeros(2, 4)}, d / "pytorch_model.bin")
    cases.append((d, "EAGLE-3"))
    d = root / "hidden"
    wide = type(tiny_llama)(type(tiny_llama.config)(**{**tiny_llama.config.to_dict(), "hidden_size": 64}))
    save_head(new_head(wide), d)
    cases.append((d, "hidden size 64, the target 32"))
    d = root / "vocab"
    save_head(new_head(make_tiny("llama", vocab=48, seed=0)), d)
    cases.append((d, "vocabulary 48, the target 40"))
    return cases


def test_bad_folders_and_mismatched_heads_are_user_errors(tmp_path, tiny_llama, make_tiny):
    for folder, needle in _bad_folders(tmp_path, tiny_llama, make_tiny):
        with pytest.raises(UserError, match=needle) as err:
            dr = make_drafter("eagle2", eagle_path=folder)
            generate(tiny_llama, [PROMPTS[0]], dr, 4)
        assert "\n" not in str(err.value), folder
    with pytest.raises(UserError, match="needs an EAGLE-1/2 checkpoint folder"):
        make_drafter("eagle2")


def _user_error(capsys, argv, needle):
    from esp_decode.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("esp-decode: error:") and needle in lines[0], err


def test_cli_eagle2_generates_greedily_and_refuses_bad_heads(tmp_path, capsys, tiny_llama, make_tiny, greedy):
    """``--drafter eagle2 --eagle-path DIR``: greedy output; bad or mismatched folders: one line, exit 2,
    no --out written."""
    from esp_decode.cli import main
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    mdir = tmp_path / "model"
    vocab = {"<pad>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .")}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>").save_pretrained(mdir)
    tiny_llama.save_pretrained(mdir)
    capsys.readouterr()                                        # save_pretrained's progress bar
    pf = tmp_path / "p.txt"
    pf.write_text("abcabcab\nhello hello\n")
    out = tmp_path / "out.jsonl"
    base = ["generate", "--model", str(mdir), "--prompt-file", str(pf), "--max-new-tokens", "8", "--json"]
    _user_error(capsys, [*base, "--drafter", "eagle2"], "needs --eagle-path")
    for folder, needle in _bad_folders(tmp_path / "bad", tiny_llama, make_tiny):
        _user_error(capsys, [*base, "--drafter", "eagle2", "--eagle-path", str(folder), "--out", str(out)], needle)
        assert not out.exists()
    good = tmp_path / "bad" / "good"
    _user_error(capsys, [*base, "--drafter", "eagle2", "--eagle-path", str(good), "--eagle-total-tokens", "1"],
                "must be >= 2")
    assert main([*base, "--drafter", "eagle2", "--eagle-path", str(good), "--batch-size", "2", "--out", str(out)]) == 0
    got, err = capsys.readouterr()
    assert err == ""
    for line in got.splitlines():
        row = json.loads(line)
        assert row["output_ids"] == greedy(tiny_llama, row["prompt_ids"], 8)


def test_sampling_with_eagle2_trees_preserves_the_target_distribution(make_tiny, two_step_law_pvalue):
    """Sampling through EAGLE-2 trees keeps the target's law: the joint law of tokens 2 and 3 (token 2
    is drafted by a tree in the second call) equals the model's, marginalised over token 1 (chi-square)."""
    model = make_tiny("llama", vocab=5, seed=3)
    prompt, n = [1, 2, 3, 1], 300
    dr = Eagle2Drafter(new_head(model, seed=0), Eagle2Config(depth=2, top_k=2, max_nodes=4))
    new, stats = generate(model, [prompt] * n, dr, 3, temperature=1.0, seed=0)
    assert all(s["tree_sizes"][1] > 0 for s in stats)                  # the second call verifies a tree
    assert two_step_law_pvalue(model, prompt, new) > 1e-3
