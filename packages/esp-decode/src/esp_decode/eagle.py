"""EAGLE-2 (Li et al. 2024, arXiv 2406.16858) as the issue's upper reference: a trained draft head
that reads the target's own features, behind the same drafter interface and verifier as ESP.

The head (an EAGLE-1/2 checkpoint folder: Llama-style ``config.json`` and ``model.safetensors`` or
``pytorch_model.bin``) is ``fc`` (2d -> d over ``concat(embedding of token t+1, feature of position
t)``) and one Llama decoder layer whose input norm is absent (EAGLE's layer 0), with no final norm;
it borrows the target's embedding and LM head. The feature is the target's last hidden state after
the final norm — what the LM head reads (EAGLE's data generation stores ``hidden_states[-1]``);
the verifier has it for every item already, so no other drafter pays for it.

Per call: the head first reads the pairs committed by the last call (features of the root and the
accepted nodes from the target, each with the token after it) into its own KV cache, then grows
EAGLE-2's dynamic tree: level 1 = the top-k children of the bonus token; at each further level the
top-k nodes of the newest level by path score (sum of draft log-probabilities) are fed to the head
in one tree-masked call and each gets its top-k children; finally every drafted node is reranked by
path score and the best ``max_nodes`` form the tree (ancestor-closed: a child never scores above
its parent). Draft positions follow EAGLE: pair (feature t, token t+1) sits at position t.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from icml26_shared import UserError

from .config import Eagle2Config
from .core import Tree
from .decode import CallRecord, Drafter

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class EagleLayer(nn.Module):
    """One Llama decoder layer as EAGLE's draft uses it: no input norm at index 0 [C]."""

    def __init__(self, cfg, index: int, keys: set[str]):
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

        super().__init__()
        d, pre = cfg.hidden_size, f"layers.{index}."
        self.index, self.heads = index, cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or d // self.heads
        bias = f"{pre}self_attn.q_proj.bias" in keys
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=bias)
        self.self_attn.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.self_attn.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.self_attn.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=f"{pre}self_attn.o_proj.bias" in keys)
        self.mlp = LlamaMLP(cfg)
        if index:
            self.input_layernorm = LlamaRMSNorm(d, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(d, eps=cfg.rms_norm_eps)

    def forward(self, h, cos, sin, past, allow):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, n, _ = h.shape
        att = self.self_attn
        x = self.input_layernorm(h) if self.index else h
        q = att.q_proj(x).view(B, n, self.heads, self.head_dim).transpose(1, 2)
        k = att.k_proj(x).view(B, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = att.v_proj(x).view(B, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allow,
                                                             enable_gqa=self.heads != self.kv_heads)
        h = h + att.o_proj(a.transpose(1, 2).reshape(B, n, -1))
        return h + self.mlp(self.post_attention_layernorm(h)), (k, v)


class EagleHead(nn.Module):
    """EAGLE-1/2's draft model: ``fc`` then the decoder layer(s); state-dict keys as in the public
    checkpoints (``fc.*``, ``layers.N.*``; ``embed_tokens.weight``, a copy of the target's, is only
    checked)."""

    def __init__(self, cfg, keys: set[str]):
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        super().__init__()
        d = cfg.hidden_size
        self.cfg = cfg
        self.fc = nn.Linear(2 * d, d, bias="fc.bias" in keys)
        self.layers = nn.ModuleList(EagleLayer(cfg, i, keys) for i in range(cfg.num_hidden_layers))
        self.rotary = LlamaRotaryEmbedding(cfg)
        self.embed_shape: tuple[int, ...] | None = None

    def forward(self, emb, feat, pos, past=None, allow=None):
        """``emb``, ``feat`` [B, n, d]; ``pos`` [B, n] draft positions; ``past`` per layer (k, v)
        [B, kv_heads, S, head_dim] or None; ``allow`` bool [B or 1, 1, n, S + n] (None: causal).
        Returns the draft hidden states [B, n, d] and every layer's (k, v) including these n."""
        h = self.fc(torch.cat([emb.to(self.fc.weight.dtype), feat.to(self.fc.weight.dtype)], -1))
        if allow is None:
            S, n = (past[0][0].shape[2] if past else 0), h.shape[1]
            allow = torch.ones(n, S + n, dtype=torch.bool, device=h.device).tril(S)[None, None]
        cos, sin = self.rotary(h, pos)
        kv = []
        for i, layer in enumerate(self.layers):
            h, c = layer(h, cos, sin, past[i] if past else None, allow)
            kv.append(c)
        return h, kv

    def check_target(self, model) -> None:
        """The head must fit the target: its hidden size, and its vocabulary (the LM head's rows)."""
        d = model.get_input_embeddings().weight.shape[1]
        V = model.get_output_embeddings().weight.shape[0]
        if self.cfg.hidden_size != d:
            raise UserError(f"the EAGLE head has hidden size {self.cfg.hidden_size}, the target {d}: "
                            "a head trained for another model")
        if self.cfg.vocab_size != V:
            raise UserError(f"the EAGLE head has vocabulary {self.cfg.vocab_size}, the target {V}: "
                            "a head trained for another model")
        if self.embed_shape is not None and tuple(self.embed_shape) != (V, d):
            raise UserError(f"the EAGLE head's embed_tokens is {list(self.embed_shape)}, the target's "
                            f"embedding [{V}, {d}]: a head trained for another model")


def load_head(path: str | Path) -> EagleHead:
    """An EAGLE-1/2 checkpoint folder -> ``EagleHead`` (CPU, fp32). Anything else is a ``UserError``."""
    from transformers import LlamaConfig

    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such EAGLE checkpoint folder")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"{path}: not an EAGLE checkpoint folder (no config.json)")
    try:
        raw = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{cfg_file}: malformed JSON ({str(exc).splitlines()[0]})") from None
    need = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    if not isinstance(raw, dict) or any(not isinstance(raw.get(k), int) for k in need):
        raise UserError(f"{cfg_file}: not a Llama-style EAGLE config (needs integer {', '.join(need)})")
    sd = _read_weights(path)
    if any(k.startswith(("midlayer.", "d2t", "t2d")) for k in sd):
        raise UserError(f"{path}: an EAGLE-3 checkpoint; only the EAGLE-1/2 layout (fc, layers.0) is supported")
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("layers.") and k.split(".")[1].isdigit()}
    if "fc.weight" not in sd or not layers:
        raise UserError(f"{path}: not an EAGLE-1/2 head (needs fc.weight and layers.0.*)")
    try:
        cfg = LlamaConfig.from_dict({**raw, "num_hidden_layers": max(layers) + 1})
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"{cfg_file}: {str(exc).splitlines()[0]}") from None
    embed = sd.pop("embed_tokens.weight", None)
    head = EagleHead(cfg, set(sd))
    try:
        head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    except RuntimeError as exc:
        why = " ".join(str(exc).split())[:300]
        raise UserError(f"{path}: the weights do not fit the config's EAGLE head ({why})") from None
    head.embed_shape = tuple(embed.shape) if embed is not None else None
    return head.eval()


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        f = path / name
        if not f.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                sd = load_file(str(f))
            else:
                sd = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated or foreign file: whatever the reader raises
            raise UserError(f"{f}: cannot read the weights ({type(exc).__name__})") from None
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise UserError(f"{f}: not a state dict of tensors")
        return sd
    raise UserError(f"{path}: no {' or '.join(WEIGHT_FILES)}")


def select_nodes(scores: list[float], max_nodes: int) -> list[int]:
    """EAGLE-2's rerank: the ``max_nodes`` candidates of highest path score, ties to the earlier one
    (so a child never enters before its parent, whose score is >= its own), in candidate order."""
    return sorted(sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:max_nodes])


class Eagle2Drafter(Drafter):
    name = "eagle2"

    def __init__(self, head: EagleHead, cfg: Eagle2Config | None = None):
        self.head, self.cfg = head, cfg or Eagle2Config()

    def bind(self, model) -> None:
        super().bind(model)
        self.head.check_target(model)
        p = next(model.parameters())
        self.head.to(device=p.device, dtype=p.dtype)
        self.embed, self.lm_head = model.get_input_embeddings(), model.get_output_embeddings()
        self.device = p.device

    def start(self, prompts: list[list[int]]) -> None:
        n = len(prompts)
        self.kv: list = [None] * n           # the head's cache: pairs 0 .. length - 1
        self.length = [0] * n
        self.pending: list = [None] * n      # target features of positions length, length + 1, ...
        self.last_tree: list = [None] * n    # (candidate tokens, parents, scores) of the last expansion

    def observe(self, b: int, rec: CallRecord) -> None:
        first = len(rec.context) - 1 - rec.n_chain   # position of the call's first item
        if first != self.length[b]:
            raise UserError("eagle2 needs the target's features of every prompt token: decode without a "
                            "pre-filled cache")
        rows = list(range(rec.n_chain + 1)) + [rec.n_chain + 1 + a for a in rec.accepted]
        self.pending[b] = rec.features[rows]

    @torch.no_grad()
    def draft(self, b: int, context: list[int], max_depth: int):
        feats = self.pending[b]
        if feats is None:          # the prefill: no feature yet
            return Tree(), []
        S, m = self.length[b], feats.shape[0]
        toks = torch.tensor(context[S + 1: S + 1 + m], device=self.device)
        pos = torch.arange(S, S + m, device=self.device)[None]
        out, self.kv[b] = self.head(self.embed(toks)[None], feats[None], pos, self.kv[b])
        self.length[b], self.pending[b] = S + m, None
        if max_depth <= 0:
            return Tree(), []
        return self.expand(b, out[0, -1], min(self.cfg.depth, max_depth)), []

    def _logp(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lm_head(h).float(), -1)

    def expand(self, b: int, h_root: torch.Tensor, levels: int) -> Tree:
        """EAGLE-2's dynamic tree from the head's state for row ``b`` (cache of ``length[b]`` pairs)."""
        K = min(self.cfg.top_k, self.lm_head.weight.shape[0])
        P, past = self.length[b], self.kv[b]
        top = torch.topk(self._logp(h_root), K)
        tokens, parents, scores = top.indices.tolist(), [-1] * K, top.values.tolist()
        frontier, front_h = list(range(K)), h_root.expand(K, -1)
        fed: dict[int, int] = {}                     # candidate -> its slot among the fed tree items
        for level in range(1, levels):
            n_fed = len(fed)
            allow = torch.zeros(1, 1, K, P + n_fed + K, dtype=torch.bool, device=self.device)
            allow[..., :P] = True
            for i, c in enumerate(frontier):         # a node sees its fed ancestors and itself
                a = parents[c]
                while a >= 0:
                    allow[0, 0, i, P + fed[a]] = True
                    a = parents[a]
                allow[0, 0, i, P + n_fed + i] = True
                fed[c] = n_fed + i
            toks = torch.tensor([tokens[c] for c in frontier], device=self.device)
            pos = torch.full((1, K), P + level - 1, device=self.device)
            out, past = self.head(self.embed(toks)[None], front_h[None], pos, past, allow)
            top = torch.topk(self._logp(out[0]), K)   # [K parents, K children]
            cu = top.values + torch.tensor([scores[c] for c in frontier], device=top.values.device)[:, None]
            first = len(tokens)
            for i, c in enumerate(frontier):
                tokens += top.indices[i].tolist()
                parents += [c] * K
            scores += cu.flatten().tolist()
            best = torch.topk(cu.flatten(), K).indices
            frontier = [first + int(j) for j in best]
            front_h = out[0][best // K]
        self.last_tree[b] = (tokens, parents, scores)
        keep = select_nodes(scores, self.cfg.max_nodes)
        tree, where = Tree(), {-1: -1}
        for c in keep:
            where[c] = tree.add(where[parents[c]], tokens[c], math.exp(scores[c]))
        return tree


def new_head(model, intermediate_size: int | None = None, seed: int = 0) -> EagleHead:
    """A random-init EAGLE-1/2 head shaped for ``model`` (Llama-style layer, ``fc`` with bias, as the
    public checkpoints): for tests and in-process training."""
    from transformers import LlamaConfig

    c = model.config
    cfg = LlamaConfig(vocab_size=model.get_output_embeddings().weight.shape[0], hidden_size=c.hidden_size,
                      intermediate_size=intermediate_size or c.intermediate_size, num_hidden_layers=1,
                      num_attention_heads=c.num_attention_heads,
                      num_key_value_heads=getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                      rms_norm_eps=getattr(c, "rms_norm_eps", 1e-6), hidden_act=getattr(c, "hidden_act", "silu"),
                      max_position_embeddings=c.max_position_embeddings,
                      rope_parameters=dict(getattr(c, "rope_parameters", None) or {"rope_type": "default",
                                                                                   "rope_theta": 10000.0}))
    torch.manual_seed(seed)
    keys = {"fc.bias"}
    return EagleHead(cfg, keys).eval()


def save_head(head: EagleHead, path: str | Path) -> None:
    """Write ``head`` in the public EAGLE layout: ``config.json`` and ``model.safetensors``."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(head.cfg.to_json_string())
    sd = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    save_file(sd, str(path / "model.safetensors"))
