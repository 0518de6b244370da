"""The goal sets of goal-conditioned Craftax [C: purejaxgcrl envs/craftax/craftax_goals.py].

The authors express each goal as a one-hot mask over a dictionary view of the symbolic
observation, achieved when any masked slot is on. We decode the same slots from the flat symbolic
observations of PyPI ``craftax`` 1.6 (``render_craftax_symbolic``) and keep only the features the
goals read (the 4 cells adjacent to the player, one-hot inventory levels, ...), so that
``achieved(obs)`` is one small mask-times-features product.

- Craftax-Classic: 136 goals = 54 inventory counts (6 items × 1..9) + 6 tools + 60 adjacent blocks
  (15 block types × 4 directions) + 16 adjacent mobs (4 × 4).
- Craftax: 512 goals = 90 + 108 inventory (counts 1..9, then ranges of 5 up to 99) + 132 blocks +
  116 mobs + 16 items (adjacent) + 8 tools + bow + 8 armour + 12 enchantments + 9 dungeon levels +
  12 attribute levels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .envs import GoalSet

DIRECTIONS = ("left", "right", "up", "down")
_DELTAS = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]])  # [C] direction_deltas[1:]


def _adjacent(map_obs: jax.Array) -> jax.Array:
    """``[4, C]`` channels of the four cells next to the player (centre of the local view)."""
    centre = np.array([map_obs.shape[0] // 2, map_obs.shape[1] // 2])
    idx = centre[None] + _DELTAS
    return map_obs[idx[:, 0], idx[:, 1]]


def _onehot_level(x: jax.Array, scale: float, n: int, sqrt: bool = False) -> jax.Array:
    v = (x * scale) ** 2 if sqrt else x * scale
    return jax.nn.one_hot(jnp.clip(jnp.round(v), 0, n - 1).astype(jnp.int32), n)


class _Layout:
    """Builds (names, masks) over a feature vector made of named blocks of given shapes."""

    def __init__(self, blocks: dict[str, tuple[int, ...]]):
        self.offsets, off = {}, 0
        for k, shape in blocks.items():
            self.offsets[k] = (off, shape)
            off += int(np.prod(shape))
        self.dim = off
        self.names: list[str] = []
        self.masks: list[np.ndarray] = []

    def add(self, name: str, block: str, *index) -> None:
        off, shape = self.offsets[block]
        m = np.zeros(shape, np.float32)
        m[index] = 1.0
        full = np.zeros(self.dim, np.float32)
        full[off:off + m.size] = m.ravel()
        self.names.append(name)
        self.masks.append(full)

    def goal_set(self, featurize) -> GoalSet:
        return GoalSet.from_masks(tuple(self.names), np.stack(self.masks), featurize)


# --- Craftax-Classic ------------------------------------------------------------------------------

CLASSIC_INVENTORY = ("wood", "stone", "coal", "iron", "diamond", "sapling")
CLASSIC_TOOLS = ("wood_pickaxe", "stone_pickaxe", "iron_pickaxe", "wood_sword", "stone_sword",
                 "iron_sword")
CLASSIC_BLOCKS = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)  # [C] valid_blocks
CLASSIC_MOBS = ("zombie", "cow", "skeleton", "arrow")


def _classic_features(obs):
    from craftax.craftax_classic.constants import OBS_DIM, BlockType

    c = len(BlockType) + 4
    n_map = OBS_DIM[0] * OBS_DIM[1] * c
    adj = _adjacent(obs[:n_map].reshape(OBS_DIM[0], OBS_DIM[1], c))
    inv = _onehot_level(obs[n_map:n_map + 12], 10.0, 10)
    return jnp.concatenate([adj.ravel(), inv.ravel()])


def craftax_classic_goal_set() -> GoalSet:
    from craftax.craftax_classic.constants import BlockType

    nb = len(BlockType)
    lay = _Layout({"adj": (4, nb + 4), "inventory": (12, 10)})
    for i, item in enumerate(CLASSIC_INVENTORY):
        for n in range(1, 10):
            lay.add(f"inventory/{item}_{n}", "inventory", i, n)
    for i, tool in enumerate(CLASSIC_TOOLS):
        lay.add(f"tools/{tool}", "inventory", i + len(CLASSIC_INVENTORY), slice(1, None))
    for b in CLASSIC_BLOCKS:
        for d, dname in enumerate(DIRECTIONS):
            lay.add(f"block_map/{BlockType(b).name}_{dname}", "adj", d, b)
    for m, mname in enumerate(CLASSIC_MOBS):
        for d, dname in enumerate(DIRECTIONS):
            lay.add(f"mob_map/{mname}_{dname}", "adj", d, nb + m)
    return lay.goal_set(_classic_features)


# --- Craftax --------------------------------------------------------------------------------------

INVENTORY = ("wood", "stone", "coal", "iron", "diamond", "sapphire", "ruby", "sapling", "torches",
             "arrows")
EXTENDED_INVENTORY = ("wood", "stone", "coal", "iron", "torches", "arrows")
MOBS = ("zombie", "gnome_warrior", "orc_soldier", "lizard", "knight", "troll", "pigman",
        "frost_troll", "cow", "bat", "snail", None, None, None, None, None, "skeleton",
        "gnome_archer", "orc_mage", "kobold", "knight_archer", "deep_thing", "fire_elemental",
        "ice_elemental", "arrow", "dagger", "fireball", None, "arrow2", "slimeball", "fireball2",
        "iceball2", None, None, "player_fireball", "player_iceball", "player_arrow", None, None,
        None)  # [C] the 40 mob-map channels (5 classes × 8 types)
ARMOUR = ("helmet", "chestplate", "pants", "boots")


def _craftax_features(obs):
    from craftax.craftax.constants import OBS_DIM, BlockType, ItemType

    c = len(BlockType) + len(ItemType) + 40 + 1
    n = OBS_DIM[0] * OBS_DIM[1] * c
    adj = _adjacent(obs[:n].reshape(OBS_DIM[0], OBS_DIM[1], c))
    inv = obs[n:n + 16]
    intrinsics = obs[n + 16 + 6:n + 16 + 6 + 9]
    armour = obs[n + 35:n + 39]
    ench = obs[n + 39:n + 43]
    level = obs[n + 43 + 5]
    feats = [
        adj.ravel(),
        _onehot_level(inv[:10], 10.0, 100, sqrt=True).ravel(),
        _onehot_level(inv[11], 4.0, 5), _onehot_level(inv[12], 4.0, 5),
        _onehot_level(inv[13], 1.0, 3), _onehot_level(inv[14], 1.0, 3),
        _onehot_level(inv[15], 1.0, 2),
        _onehot_level(armour, 2.0, 3).ravel(), _onehot_level(ench, 1.0, 3).ravel(),
        _onehot_level(level, 10.0, 10), _onehot_level(intrinsics, 10.0, 20).ravel(),
    ]
    return jnp.concatenate(feats)


def craftax_goal_set() -> GoalSet:
    from craftax.craftax.constants import BlockType, ItemType

    nb, ni = len(BlockType), len(ItemType)
    lay = _Layout({"adj": (4, nb + ni + 41), "inventory": (10, 100), "pickaxe": (5,),
                   "sword": (5,), "sword_enchantment": (3,), "bow_enchantment": (3,),
                   "bow": (2,), "armour": (4, 3), "armour_enchantments": (4, 3),
                   "dungeon_level": (10,), "intrinsics": (9, 20)})
    for i, item in enumerate(INVENTORY):
        for n in range(1, 10):
            lay.add(f"inventory/{item}_{n}", "inventory", i, n)
    for i, item in enumerate(INVENTORY):
        if item in EXTENDED_INVENTORY:
            for n in range(10, 100, 5):
                lay.add(f"inventory/{item}_{n}-{n + 4}", "inventory", i, slice(n, n + 5))
    skip = {BlockType.GRAVEL.value, BlockType.DARKNESS.value, BlockType.WOOD.value,
            BlockType.INVALID.value}
    for b in BlockType:
        if b.value not in skip:
            for d, dname in enumerate(DIRECTIONS):
                lay.add(f"block_map/{b.name}_{dname}", "adj", d, b.value)
    for m, mname in enumerate(MOBS):
        if mname is not None:
            for d, dname in enumerate(DIRECTIONS):
                lay.add(f"mob_map/{mname}_{dname}", "adj", d, nb + ni + m)
    for it in ItemType:
        if it.value != ItemType.NONE.value:
            for d, dname in enumerate(DIRECTIONS):
                lay.add(f"item_map/{it.name}_{dname}", "adj", d, nb + it.value)
    for i, material in enumerate(("wood", "stone", "iron", "diamond")):
        for tool in ("pickaxe", "sword"):
            lay.add(f"tools/{material}_{tool}", tool, i + 1)
    lay.add("tools/bow", "bow", 1)
    for i, piece in enumerate(ARMOUR):
        for j, material in enumerate(("iron", "diamond")):
            lay.add(f"tools/{material}_{piece}", "armour", i, j + 1)
    for i, piece in enumerate(ARMOUR):
        for j, kind in enumerate(("fire", "ice")):
            lay.add(f"enchant/{piece}_{kind}", "armour_enchantments", i, j + 1)
    for i, kind in enumerate(("fire", "ice")):
        for weapon in ("sword", "bow"):
            lay.add(f"enchant/{weapon}_{kind}", f"{weapon}_enchantment", i + 1)
    for i in range(9):
        lay.add(f"dungeon_level/dlvl_{i}", "dungeon_level", i)
    for i, attr in enumerate(("intelligence", "strength", "dexterity")):
        for j in range(2, 6):
            lay.add(f"intrinsics/{attr}_{j}", "intrinsics", 8 - i, j)
    return lay.goal_set(_craftax_features)
