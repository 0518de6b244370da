"""The paper's maths: Gaussian KL, the frozen tokenizer, the slot factoriser with causal temporal
attention, the shared per-slot IDM / FDM, the aggregator, and FLAM's loss. PyTorch modules and
pure functions: no I/O, no logging, no global state."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig


def gaussian_kl(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag exp(logvar)) || N(0, I)) summed over the last axis [P: the prior is N(0, I)]."""
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(-1)


def tokenize(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """Frozen tokenizer [R]: ``[..., H, W, 3]`` uint8 -> ``[..., N, patch*patch*3]`` in [0, 1].
    Exactly invertible (``detokenize``); stands in for the paper's frozen VQ-VAE [P]."""
    *lead, h, w, c = frames.shape
    x = frames.float().div(255.0).reshape(*lead, h // patch, patch, w // patch, patch, c)
    x = x.movedim(-4, -3)  # [..., h/p, w/p, p, p, c]
    return x.reshape(*lead, (h // patch) * (w // patch), patch * patch * c)


def detokenize(z: torch.Tensor, size: int, patch: int) -> torch.Tensor:
    """Inverse of ``tokenize``: ``[..., N, p*p*3]`` -> ``[..., H, W, 3]`` floats in [0, 1]."""
    *lead, n, _ = z.shape
    g = size // patch
    x = z.reshape(*lead, g, g, patch, patch, 3).movedim(-3, -4)
    return x.reshape(*lead, size, size, 3).clamp(0, 1)


def grid_coords(n_tokens: int) -> torch.Tensor:
    """``[N, 4]`` (row, col, 1 - row, 1 - col) in [0, 1] of a square token grid (row-major)."""
    g = int(round(n_tokens ** 0.5))
    r, c = torch.meshgrid(torch.linspace(0, 1, g), torch.linspace(0, 1, g), indexing="ij")
    r, c = r.reshape(-1), c.reshape(-1)
    return torch.stack([r, c, 1 - r, 1 - c], -1)


@torch.no_grad()
def farthest_points(z: torch.Tensor, m: int) -> torch.Tensor:
    """Indices ``[B, m]`` of ``m`` tokens of ``z [B, N, C]`` picked by farthest-point seeding (as
    k-means++ without sampling): each the token farthest from the frame's mean token and from the
    tokens already picked [R]."""
    b = z.shape[0]
    dmin = (z - z.mean(1, keepdim=True)).pow(2).sum(-1)   # [B, N]
    picks = []
    for _ in range(m):
        i = dmin.argmax(1)
        picks.append(i)
        dmin = torch.minimum(dmin, (z - z[torch.arange(b), i].unsqueeze(1)).pow(2).sum(-1))
    return torch.stack(picks, 1) if picks else torch.zeros(b, 0, dtype=torch.long, device=z.device)


def token_xy(n_tokens: int) -> torch.Tensor:
    """``[N, 2]`` (row, col) token centres of a square grid in token units, centred on 0."""
    g = int(round(n_tokens ** 0.5))
    return grid_coords(n_tokens)[:, :2] * (g - 1) - (g - 1) / 2.0


def mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.GELU(), nn.Linear(h, o))


class SlotFactorizer(nn.Module):
    """Slot Attention over the tokens of each frame; with ``temporal`` the slots of t-1 initialise
    those of t (tracking, [R]) and a causal attention over each slot's own past refines them [P].
    Keys come from the tokens' content only (see ``encode``)."""

    def __init__(self, cfg: ModelConfig, token_dim: int, n_tokens: int):
        super().__init__()
        d, self.k, self.iters, self.temporal = cfg.width, cfg.slots, cfg.iters, cfg.temporal
        self.iters_carry = cfg.iters_carry
        self.embed = mlp(token_dim, d, d)
        self.pos_kind = cfg.pos
        if cfg.slot_pos:
            pass  # the position enters only as each slot's centroid: no position embedding (no unused weights)
        elif cfg.pos == "grid":  # soft position embedding: a linear map of fixed (x, y, 1-x, 1-y) [Locatello et al.]
            self.register_buffer("coords", grid_coords(n_tokens))
            self.pos_proj = nn.Linear(4, d)
        else:
            self.pos = nn.Parameter(torch.randn(n_tokens, d) * 0.1)
        self.init = nn.Parameter(torch.randn(cfg.slots, d) * 0.5)
        self.norm_in, self.norm_s = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.kk, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.gru = nn.GRUCell(d, d)
        self.ff = mlp(d, 2 * d, d)
        self.time_attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.scale = d ** -0.5
        self.slot_pos = cfg.slot_pos
        if cfg.slot_pos:  # token centres in token units (row, col; 0 at the grid's centre, one token = 1)
            self.register_buffer("xy", token_xy(n_tokens))
        self.local = cfg.local_sigma > 0
        if self.local:  # the locality's precision per slot: none for the background slot 0, 1 / (2 sigma^2) else
            prec = torch.full((cfg.slots, 1), 0.5 / cfg.local_sigma ** 2)
            prec[0] = 0.0
            self.register_buffer("prec", prec, persistent=False)

    def position(self) -> torch.Tensor:
        return self.pos_proj(self.coords) if self.pos_kind == "grid" else self.pos

    def _attend(self, keys: torch.Tensor, vals: torch.Tensor, slots: torch.Tensor, iters: int,
                pos: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``iters`` Slot Attention updates of ``slots [B, K, D]`` over ``keys / vals [B, N, D]``;
        returns the slots, the last update's attention ``[B, N, K]`` (softmax over slots) and, with
        ``local_sigma``, the slots' positions ``pos [B, K, 2]`` (given: before the first update; each
        update's logits lose |c_n - p_k|^2 / (2 sigma^2), then p_k is its new centroid)."""
        b, k, d = slots.shape
        keys_t = keys.transpose(1, 2)
        for _ in range(iters):
            q = self.q(self.norm_s(slots))
            # laid out [B, K, N]: the softmax over the K slots runs along a middle axis, ~15x faster on CPU
            # than over a last axis of size K (the same numbers)
            logits = torch.bmm(q, keys_t) * self.scale
            if pos is not None:
                logits = logits - self.prec * (self.xy - pos.unsqueeze(-2)).pow(2).sum(-1)
            attn = torch.softmax(logits, dim=1)
            w = attn + 1e-8
            w = w / w.sum(-1, keepdim=True)  # a weighted mean over the tokens
            slots = self.gru(torch.bmm(w, vals).reshape(-1, d), slots.reshape(-1, d)).reshape(b, k, d)
            slots = slots + self.ff(slots)
            if pos is not None:
                pos = self._centroid(attn.transpose(1, 2))
        return slots, attn.transpose(1, 2), pos

    def _seed(self, z: torch.Tensor, vals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Initial slots ``[B, K, D]`` of frames ``z [B, N, C]`` (raw tokens) with values ``vals [B, N, D]``:
        slot 0 a learned background vector, slots 1..K-1 the values of the K-1 tokens picked by
        farthest-point (k-means++-style) seeding from the frame's mean token (plus a learned offset per slot)
        [R: Slot Attention is a soft k-means; seeding each slot on a distinct token binds it to one entity
        from the first step]. With ``local_sigma`` also the slots' first positions
        ``[B, K, 2]`` (the seed tokens' centres; the background slot, which has no locality, at the centre),
        else None."""
        b = z.shape[0]
        idx = farthest_points(z, self.k - 1)
        seeds = torch.gather(vals, 1, idx.unsqueeze(-1).expand(-1, -1, vals.shape[-1]))
        pos = torch.cat([torch.zeros(b, 1, 2, device=z.device), self.xy[idx]], 1) if self.local else None
        return torch.cat([self.init[:1].expand(b, -1, -1), seeds + self.init[1:]], 1), pos

    def _centroid(self, attn: torch.Tensor) -> torch.Tensor:
        """Each slot's position ``[B, K, 2]``: the mean token centre weighted by its squared assignment
        ``attn [B, N, K]`` (Invariant Slot Attention's p_k, sharpened: the many tokens a slot barely holds
        do not drag a one-token object's position to the centre) [R]."""
        w = attn.pow(2) + 1e-8
        w = w / w.sum(1, keepdim=True)
        return torch.einsum("bnk,nc->bkc", w, self.xy)

    def _with_pos(self, slots: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """``slots [B, K, D]`` -> ``[B, K, D + 2]``: each slot's position (``_centroid`` of ``attn``) appended."""
        return torch.cat([slots, self._centroid(attn)], -1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``z [B, T, N, token_dim]`` -> slots ``[B, T, K, D]``."""
        return self.encode(z)[0]

    def encode(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z [B, T, N, token_dim]`` -> (slots ``[B, T, K, D]``, attention ``[B, T, N, K]``)."""
        b, t, n, _ = z.shape
        e = self.embed(z)
        content = self.norm_in(e)
        # with slot_pos the position is the slot's own centroid (appended below), so the values carry
        # content only; else the position embedding reaches the slot through the values [R, 0.4]
        x = content if self.slot_pos else self.norm_in(e + self.position())
        vals = self.v(x)  # every frame at once
        # keys from the tokens' content only: a slot's query matches an entity's appearance wherever it
        # is, so slots bind to entities, not to regions
        keys = self.kk(content)
        d = keys.shape[-1]
        if not self.temporal:  # frames independent: one batched call over B*T, same init every frame
            init, pos = self._seed(z.reshape(b * t, n, -1), vals.reshape(b * t, n, d))
            s, attn, _ = self._attend(keys.reshape(b * t, n, d), vals.reshape(b * t, n, d), init, self.iters, pos)
            if self.slot_pos:
                s = self._with_pos(s, attn)
            return s.reshape(b, t, self.k, -1), attn.reshape(b, t, n, self.k)
        # slots carried over time (the causal recurrence is sequential): `iters` updates on frame 0,
        # `iters_carry` on each later frame starting from the previous frame's slots [R, as in SAVi]
        # unbind (not keys[:, i]): its backward stacks the frames' gradients once instead of scattering
        # each into a zero tensor of the whole window
        keys_t, vals_t = keys.unbind(1), vals.unbind(1)
        (prev, pos), slots, attns = self._seed(z[:, 0], vals_t[0]), [], []
        for i in range(t):
            prev, attn, pos = self._attend(keys_t[i], vals_t[i], prev, self.iters if i == 0 else self.iters_carry, pos)
            slots.append(prev)
            attns.append(attn)
        s, attn = torch.stack(slots, 1), torch.stack(attns, 1)
        seq = s.transpose(1, 2).reshape(b * self.k, t, d)  # each slot's own history
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=z.device), 1)
        out, _ = self.time_attn(seq, seq, seq, attn_mask=mask, need_weights=False)
        s = (seq + out).reshape(b, self.k, t, d).transpose(1, 2)
        if self.slot_pos:  # the position of each slot at each frame, from that frame's assignment
            s = self._with_pos(s.reshape(b * t, self.k, d), attn.reshape(b * t, n, self.k)).reshape(b, t, self.k, -1)
        return s, attn


def idm_pair(s_t: torch.Tensor, s_next: torch.Tensor, delta: bool) -> torch.Tensor:
    """What the IDM reads of a slot's two states ``[..., D]`` (the last 2 numbers its position when slots
    carry one): both states (``delta`` False), or both states' features and the position change
    p_{t+1} - p_t, never an absolute position (``delta``; ``ModelConfig.idm_input``) [R]."""
    if not delta:
        return torch.cat([s_t, s_next], -1)
    return torch.cat([s_t[..., :-2], s_next[..., :-2], s_next[..., -2:] - s_t[..., -2:]], -1)


class SharedIDM(nn.Module):
    """q(a^k | s_t^k, s_{t+1}^k) = N(mu, diag sigma^2), one network for every slot [P]; with ``delta`` it reads
    the slot's features and position change only (``idm_pair``)."""

    def __init__(self, width: int, latent: int, delta: bool = False):
        super().__init__()
        self.delta = delta
        self.net = mlp(2 * width - (2 if delta else 0), 2 * width, 2 * latent)

    def forward(self, s_t: torch.Tensor, s_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = self.net(idm_pair(s_t, s_next, self.delta)).chunk(2, -1)
        return mu, logvar.clamp(-8, 4)


class PooledIDM(nn.Module):
    """flam-one-latent's IDM [R]: q(a | s_t^{1..K}, s_{t+1}^{1..K}) = N(mu, diag sigma^2), one latent of
    size d from every slot's two states concatenated (slot order as the factoriser gives it); ``[B, T, 1, d]``."""

    def __init__(self, width: int, slots: int, latent: int, delta: bool = False):
        super().__init__()
        self.delta = delta
        self.net = mlp(slots * (2 * width - (2 if delta else 0)), 2 * width, 2 * latent)

    def forward(self, s_t: torch.Tensor, s_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = idm_pair(s_t, s_next, self.delta).flatten(-2).unsqueeze(-2)
        mu, logvar = self.net(x).chunk(2, -1)
        return mu, logvar.clamp(-8, 4)


class SharedFDM(nn.Module):
    """s_hat_{t+1}^k = s_t^k + f(s_t^k, a^k, attention over the other slots) [P shared; R cross-slot]."""

    def __init__(self, width: int, latent: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.net = mlp(2 * width + latent, 2 * width, width)

    def forward(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        lead, (k, d) = s.shape[:-2], s.shape[-2:]
        a = a.expand(*s.shape[:-1], a.shape[-1])  # flam-one-latent: its one latent to every slot
        flat = s.reshape(-1, k, d)
        ctx = torch.zeros_like(flat)
        if k > 1:  # a slot attends to every other slot, never to itself
            eye = torch.eye(k, dtype=torch.bool, device=s.device)
            ctx, _ = self.attn(flat, flat, flat, attn_mask=eye, need_weights=False)
        ctx = ctx.reshape(*lead, k, d)
        return s + self.net(torch.cat([s, a, ctx], -1))


class Aggregator(nn.Module):
    """z_hat = sum_k softmax_k(m_k) * x_k with (x_k, m_k) for every token n = g(slot_k)[n]: one MLP
    shared by the slots maps a slot to every token's content and mixing logit (position-specific
    output weights), a mixture decoder invariant to slot order [R] (0.2's spatial-broadcast
    g(slot_k + pos_n) was 4x slower and learned far more slowly)."""

    def __init__(self, width: int, token_dim: int, n_tokens: int):
        super().__init__()
        self.n, self.c = n_tokens, token_dim
        self.net = mlp(width, 2 * width, n_tokens * (token_dim + 1))

    def parts(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each slot's token contents ``[..., K, N, token_dim]`` and mixing logits ``[..., K, N, 1]``."""
        out = self.net(s).unflatten(-1, (self.n, self.c + 1))
        return out[..., :-1], out[..., -1:]

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        x, m = self.parts(s)
        return (torch.softmax(m, dim=-3) * x).sum(-3)


class BroadcastAggregator(nn.Module):
    """Spatial-broadcast mixture decoder [R, as in Slot Attention / MONet]: (x_kn, m_kn) =
    g(A slot_k + P(pos_n)) with P a linear map of the token's fixed grid coordinates, one network
    for every slot and position, then z_hat_n = sum_k softmax_k(m_kn) x_kn (invariant to slot order)."""

    def __init__(self, width: int, token_dim: int, n_tokens: int):
        super().__init__()
        self.register_buffer("coords", grid_coords(n_tokens))
        self.inp, self.pos = nn.Linear(width, width), nn.Linear(4, width)
        self.net = mlp(width, width, token_dim + 1)

    def parts(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each slot's token contents ``[..., K, N, token_dim]`` and mixing logits ``[..., K, N, 1]``."""
        out = self.net(torch.nn.functional.gelu(self.inp(s).unsqueeze(-2) + self.pos(self.coords)))
        return out[..., :-1], out[..., -1:]

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        x, m = self.parts(s)
        return (torch.softmax(m, dim=-3) * x).sum(-3)


class SlotCompositor(nn.Module):
    """The aggregator with explicit slot positions [R: spatial broadcast decoder (Watters et al.) in
    each slot's own frame (Invariant Slot Attention, Biza et al.), alpha-composited as in Slot
    Attention]: slot k = (features f_k, position p_k) is decoded *alone* at every token n from f_k and
    the relative position r = (c_n - p_k) in token units (r and r^2), one network for every slot, to
    a content x_kn and a logit m_kn; z_hat_n = sum_k softmax_k(m_kn) x_kn. A slot can only paint
    around its own position, so the loss rewards a slot for owning one object."""

    def __init__(self, width: int, token_dim: int, n_tokens: int, hidden: int = 32):
        super().__init__()
        self.register_buffer("xy", token_xy(n_tokens))
        self.feat, self.rel = nn.Linear(width - 2, hidden), nn.Linear(4, hidden, bias=False)
        self.net = mlp(hidden, hidden, token_dim + 1)

    def masks(self, s: torch.Tensor) -> torch.Tensor:
        """The alpha masks ``[..., K, N, 1]`` (softmax over the slots: they sum to one at every token)."""
        return torch.softmax(self.parts(s)[1], dim=-3)

    def parts(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each slot's token contents ``[..., K, N, token_dim]`` and mixing logits ``[..., K, N, 1]``."""
        f, p = s[..., :-2], s[..., -2:]
        r = self.xy - p.unsqueeze(-2)                         # [..., K, N, 2] in token units
        h = self.feat(f).unsqueeze(-2) + self.rel(torch.cat([r, r * r], -1))
        out = self.net(torch.nn.functional.gelu(h))
        return out[..., :-1], out[..., -1:]

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        x, m = self.parts(s)
        return (torch.softmax(m, dim=-3) * x).sum(-3)


class MonolithicEncoder(nn.Module):
    """The monolithic model's 'slots': K = 1, one vector per frame from all tokens [R]."""

    def __init__(self, cfg: ModelConfig, token_dim: int, n_tokens: int):
        super().__init__()
        self.embed = mlp(token_dim, cfg.width, cfg.width // 4)
        self.proj = mlp(n_tokens * (cfg.width // 4), 2 * cfg.width, cfg.width)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.embed(z)
        return self.proj(h.flatten(-2)).unsqueeze(-2)  # [B, T, 1, D]


class TokenEncoder(nn.Module):
    """lam-token's state [R]: every token of z_t embedded with its position, ``[B, T, N, D]`` -- a
    per-token state, never pooled (LAPO / Genie / AdaWorld dynamics act on the token map)."""

    def __init__(self, width: int, token_dim: int, n_tokens: int):
        super().__init__()
        self.embed = mlp(token_dim, width, width)
        self.pos = nn.Parameter(torch.randn(n_tokens, width) * 0.1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.embed(z) + self.pos


def _block(width: int) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True, norm_first=True)


class TokenIDM(nn.Module):
    """lam-token's IDM [P: LAPO / Genie latent action model; R sizes]: one transformer block over the 2N tokens
    of (z_t, z_{t+1}) -- with ``delta``, of (z_t, z_{t+1} - z_t), each token's change -- (a learned embedding
    tells the two apart), read out to one Gaussian latent of size d by a learned query token (``query``) or
    the tokens' mean, ``[B, T, 1, d]`` (``ModelConfig.token_idm``)."""

    def __init__(self, width: int, latent: int, query: bool = True, delta: bool = True):
        super().__init__()
        self.frame = nn.Parameter(torch.randn(2, width) * 0.1)
        self.query = nn.Parameter(torch.randn(1, 1, width) * 0.1) if query else None
        self.delta = delta
        self.block = _block(width)
        self.head = mlp(width, 2 * width, 2 * latent)

    def forward(self, s_t: torch.Tensor, s_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lead, (n, d) = s_t.shape[:-2], s_t.shape[-2:]
        second = s_next - s_t if self.delta else s_next
        x = torch.cat([s_t + self.frame[0], second + self.frame[1]], -2).reshape(-1, 2 * n, d)
        if self.query is None:
            out = self.block(x).mean(1)
        else:
            out = self.block(torch.cat([self.query.expand(x.shape[0], 1, d), x], 1))[:, 0]
        mu, logvar = self.head(out).chunk(2, -1)
        return mu.reshape(*lead, 1, -1), logvar.clamp(-8, 4).reshape(*lead, 1, -1)


class TokenFDM(nn.Module):
    """lam-token's FDM [P: a dynamics model over z_t's tokens conditioned on the latent; R sizes]: the latent
    added at every token, one transformer block, a residual update of every token's state ``[..., N, D]``."""

    def __init__(self, width: int, latent: int):
        super().__init__()
        self.inp = nn.Linear(latent, width)
        self.block = _block(width)

    def forward(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        lead, (n, d) = s.shape[:-2], s.shape[-2:]
        x = (s + self.inp(a)).reshape(-1, n, d)
        return self.block(x).reshape(*lead, n, d)  # the block is pre-norm residual: x + attention + MLP


def quantize(e: torch.Tensor, codebook: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nearest-code vector quantisation (VQ-VAE, as in Genie's latent action model) [P baseline]:
    ``(straight-through codes, codebook + 0.25 * commitment loss, code index)``."""
    dist = (e.unsqueeze(-2) - codebook).pow(2).sum(-1)        # [..., codes]
    idx = dist.argmin(-1)
    q = codebook[idx]
    loss = (q - e.detach()).pow(2).sum(-1).mean() + 0.25 * (e - q.detach()).pow(2).sum(-1).mean()
    return e + (q - e).detach(), loss, idx


class WorldModel(nn.Module):
    """FLAM (``model="flam"``), the monolithic continuous LAM (``model="lam"``, AdaWorld-style) or
    the monolithic VQ LAM (``model="lam-vq"``, Genie-style): one interface, one loss, one training
    loop. Shapes: slots [B, T, K, D], latents [B, T-1, K, d/K]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        # the frozen tokenizer: a submodule (its weights travel in the RUN's files) that is never trained
        self.tokenizer = make_tokenizer(cfg)
        n_tokens, token_dim = self.tokenizer.n_tokens, self.tokenizer.token_dim
        if cfg.model == "lam-token":  # per-token state, transformer IDM / FDM, a per-token linear decoder
            self.factorizer = TokenEncoder(cfg.width, token_dim, n_tokens)
            self.idm = TokenIDM(cfg.width, cfg.latent_dim, cfg.token_idm != "mean", cfg.token_idm == "query-delta")
            self.fdm = TokenFDM(cfg.width, cfg.latent_dim)
            self.agg = nn.Linear(cfg.width, token_dim)
            return
        if cfg.model == "flam":
            self.factorizer = SlotFactorizer(cfg, token_dim, n_tokens)
        else:
            self.factorizer = MonolithicEncoder(cfg, token_dim, n_tokens)
        factored = cfg.model == "flam"
        state = cfg.width + (2 if factored and cfg.slot_pos else 0)  # a slot's state: features (+ position)
        self.idm = (PooledIDM(state, cfg.slots, cfg.latent_dim, cfg.idm_delta) if cfg.one_latent
                    else SharedIDM(state, cfg.slot_latent, cfg.idm_delta))
        self.fdm = SharedFDM(state, cfg.slot_latent)
        if factored:
            self.agg = (SlotCompositor(state, token_dim, n_tokens, cfg.decoder_hidden) if cfg.slot_pos
                        else BroadcastAggregator(state, token_dim, n_tokens))
        else:
            self.agg = Aggregator(state, token_dim, n_tokens)
        if cfg.model == "lam-vq":
            self.codebook = nn.Parameter(torch.randn(cfg.codes, cfg.slot_latent))

    def train(self, mode: bool = True) -> WorldModel:
        super().train(mode)
        self.tokenizer.eval()  # frozen, always
        return self

    def tokenize(self, frames) -> torch.Tensor:
        """``[..., H, W, 3]`` uint8 frames -> tokens ``[..., N, token_dim]`` (frozen, no gradients)."""
        from .tokenizer import encode_batched

        return encode_batched(self.tokenizer, frames)

    def detokenize(self, z: torch.Tensor) -> torch.Tensor:
        """Tokens -> frames ``[..., H, W, 3]`` floats in [0, 1]."""
        with torch.no_grad():
            return self.tokenizer.decode(z).clamp(0, 1)

    def slots(self, z: torch.Tensor) -> torch.Tensor:
        return self.factorizer(z)

    def infer(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-slot Gaussian posteriors ``(mu, logvar)`` of the latent actions between consecutive
        frames; for ``lam-vq`` the chosen code vectors and zeros."""
        mu, logvar = self.idm(s[:, :-1], s[:, 1:])
        if self.cfg.model == "lam-vq":
            return quantize(mu, self.codebook)[0], torch.zeros_like(mu)
        return mu, logvar

    def loss(self, z: torch.Tensor, gen: torch.Generator | None = None,
             eps: torch.Tensor | None = None, unroll: int | None = None) -> tuple[torch.Tensor, dict]:
        """L = ||z_{t+1} - z_hat_{t+1}||^2 + beta * sum_k KL(q(a^k) || N(0, I)) [P], + recon [R]
        (with ``free_bits`` each slot's batch-mean KL floored at it, free bits [R]);
        with ``unroll`` U > 1 the first term is the mean of the 1..U-step errors (``unrolled_errors``;
        U = ``cfg.unroll`` unless given, as the training loop does during its one-step warm-up).
        z_hat_{t+1} = Agg(s_hat_{t+1}); recon = ||z_t - Agg(s_t)||^2 over the window's frames (``recon_all``)
        or frame 0.
        ``lam-vq`` replaces the KL by the VQ codebook + commitment loss [P: Genie]. ``eps`` (the
        reparameterisation noise, shape of the latents) is drawn from ``gen`` unless given."""
        s = self.slots(z)
        mu, logvar = self.idm(s[:, :-1], s[:, 1:])
        kl_bk = gaussian_kl(mu, logvar)  # [B, T-1, K]: each slot's KL per transition
        kl = kl_bk.sum(-1).mean()
        if self.cfg.model == "lam-vq":
            a, reg, _ = quantize(mu, self.codebook)
        else:
            if eps is None:
                eps = torch.randn(mu.shape, generator=gen, device=mu.device)
            a = mu + eps * (0.5 * logvar).exp()
            # free bits: a slot's KL below the floor is not priced (no gradient toward collapse)
            fb = self.cfg.free_bits
            priced = kl_bk.flatten(0, -2).mean(0).clamp_min(fb).sum() if fb else kl
            reg = self.cfg.beta * priced
        first = z.shape[1] if self.cfg.recon_all else 1  # every frame or frame 0, where rollouts start [R]
        recon = (z[:, :first] - self.agg(s[:, :first])).pow(2).sum(-1).mean()
        terms = self.unrolled_errors(s, a, z, unroll)
        pred = torch.stack(terms).mean()
        total = pred + reg + self.cfg.recon * recon
        return total, {"pred": terms[0].item(), "pred_unroll": pred.item(), "kl": kl.item(), "reg": reg.item(),
                       "recon": recon.item()}

    def unrolled_errors(self, s: torch.Tensor, a: torch.Tensor, z: torch.Tensor,
                        unroll: int | None = None) -> list[torch.Tensor]:
        """Multi-step FDM loss [R]: from every true slot state s_t, the FDM is applied to its own
        predictions j = 1..U times with the latent actions a_t .. a_{t+j-1} (as ``rollout`` does at
        evaluation), and each ẑ_{t+j} is scored against z_{t+j}; returns the U mean squared errors
        (U = ``cfg.unroll``, cut to the window). U = 1 is the paper's one-step loss [P]. Gradients
        flow through the whole unroll (the FDM learns to correct its own drift)."""
        cur, terms = s[:, :-1], []
        for j in range(min(self.cfg.unroll if unroll is None else unroll, a.shape[1])):
            cur = self.fdm(cur, a[:, j:])  # cur[:, i] predicts the slots of frame i + j + 1
            terms.append((z[:, j + 1:] - self.agg(cur)).pow(2).sum(-1).mean())
            cur = cur[:, :-1]  # the last start has no frame j + 2 in the window
        return terms

    def forward(self, z: torch.Tensor, eps: torch.Tensor | None = None,
                unroll: int | None = None) -> tuple[torch.Tensor, dict]:
        """The training loss (what DDP / accelerate call): ``loss(z, eps=eps, unroll=unroll)``."""
        return self.loss(z, eps=eps, unroll=unroll)

    @torch.no_grad()
    def rollout(self, z: torch.Tensor, latents: torch.Tensor | None = None) -> torch.Tensor:
        """Autoregressive rollout from frame 0 with latent actions inferred from the true frames
        (posterior means) unless ``latents`` is given: ``[B, T-1, N, token_dim]`` predictions."""
        s = self.slots(z)
        if latents is None:
            latents = self.infer(s)[0]
        cur, preds = s[:, 0], []
        for t in range(latents.shape[1]):
            cur = self.fdm(cur, latents[:, t])
            preds.append(self.agg(cur))
        return torch.stack(preds, 1)


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """PSNR in dB of images in [0, 1] over the last three axes."""
    mse = (pred - target).pow(2).flatten(-3).mean(-1).clamp_min(1e-10)
    return 10.0 * torch.log10(1.0 / mse)


def n_params(module: nn.Module) -> int:
    """Trainable parameters (the frozen tokenizer is not counted)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def make_tokenizer(cfg: ModelConfig) -> nn.Module:
    """The frozen tokenizer ``cfg`` names, its parameters never trained: the exact patch tokenizer or
    a ``ConvTokenizer`` (weights loaded afterwards from a fitted one)."""
    from .tokenizer import ConvTokenizer, PatchTokenizer, freeze

    if cfg.tokenizer == "patch":
        return PatchTokenizer(cfg.size, cfg.patch)
    return freeze(ConvTokenizer(cfg.size, cfg.token_grid, cfg.token_channels, cfg.token_hidden))


def chance(y) -> float:
    """Accuracy of always predicting the most frequent label."""
    import numpy as np

    _, counts = np.unique(np.asarray(y), return_counts=True)
    return float(counts.max() / counts.sum())


__all__ = ["gaussian_kl", "tokenize", "detokenize", "SlotFactorizer", "SharedIDM", "SharedFDM",
           "Aggregator", "SlotCompositor", "quantize", "WorldModel", "psnr", "n_params", "chance"]
