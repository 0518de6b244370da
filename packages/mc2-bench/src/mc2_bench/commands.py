"""The heavier CLI verbs (``smol-vlm``, ``build``) and item sharding under ``accelerate launch``;
``cli.py`` stays a thin parser. Users' mistakes raise ``UserError``; nothing is half-written."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from icml26_shared import UserError


def shard(items: list) -> tuple[list, object | None]:
    """Under ``accelerate launch`` (WORLD_SIZE > 1): this process's contiguous share of the items
    and the state to gather with; otherwise all items and None."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return items, None
    from accelerate import PartialState

    state = PartialState(cpu=not __import__("torch").cuda.is_available())
    n, k, r = len(items), state.num_processes, state.process_index
    lo, hi = r * n // k, (r + 1) * n // k
    return items[lo:hi], state


def gather(records: list, state) -> list:
    """All processes' per-order answer records in item order (rank order = item order)."""
    if state is None:
        return records
    from accelerate.utils import gather_object

    parts = gather_object([records])
    return [r for part in parts for r in part]


def cmd_smol_vlm(args) -> int:
    from .io import refuse_existing
    from .offline.experiments import _split
    from .offline.smolvlm import SmolVLMConfig, cached_smol_vlm, copy_model
    from .offline.toy import load_digits

    refuse_existing(args.out)
    X, y = load_digits()
    tr, _, _ = _split(len(y))
    src = cached_smol_vlm(X[tr], y[tr], SmolVLMConfig(), args.seed)
    copy_model(src, args.out)
    stats = json.loads((args.out / "mc2_smol_vlm.json").read_text())
    print(f"smol-vlm (LLaVA + frozen SmolLM2-135M-Instruct; tower nearest-name accuracy on its "
          f"training digits {stats['train_nearest_name_accuracy']:.3f}) written to {args.out}")
    return 0


def digits_generator(q: dict) -> tuple[str, str]:
    """The built-in generator for digit VQA items: another digit, asserted by a numbered report."""
    from .config import DIGITS

    if q["answer"] not in DIGITS:
        raise UserError(f"item {q.get('id')}: the digits generator needs a digit-name answer, got {q['answer']!r}")
    k = sum(map(ord, str(q.get("id")))) % 10  # deterministic source / shift per item id
    t = DIGITS[(DIGITS.index(q["answer"]) + 1 + k % 9) % 10]
    return t, f"Report {k}: the handwritten digit in the picture is {t}."


def _generator(spec: str):
    if spec == "digits":
        return digits_generator
    mod, _, fn = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError, ValueError):
        raise UserError(f"--generator {spec!r}: give 'digits' or module:function importable here") from None


def _read_vqa(path: Path, image_root: Path) -> list[dict]:
    from .io import _image_path

    if not path.is_file():
        raise UserError(f"{path} does not exist")
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise UserError(f"{path}: malformed JSON") from None
    if not isinstance(data, list) or not data:
        raise UserError(f"{path}: expected a non-empty list of VQA items")
    out = []
    for i, q in enumerate(data):
        miss = [k for k in ("question", "answer") if not isinstance(q, dict) or k not in q]
        iid = q.get("image_id", q.get("image")) if isinstance(q, dict) else None
        if miss or iid is None:
            raise UserError(f"{path}: item {i} lacks {', '.join(miss or ['image_id'])}")
        img = _image_path(iid, image_root)
        if img is None:
            raise UserError(f"item {q.get('id', i)}: image {iid} not found under {image_root}")
        out.append({**q, "id": q.get("id", i), "image": str(img), "image_id": iid})
    return out


def cmd_build(args, load_model) -> int:
    """VQA items -> MC2 conflicts kept only where the model alone answers each modality's answer
    (both option orders) [C] filter; the counterfactual writer is ``--generator`` [R]."""
    from icml26_shared.io import atomic_write_text, dumps_json

    from .core import options
    from .io import build_conflicts, refuse_existing

    refuse_existing(args.out)
    gen = _generator(args.generator)
    vqa = _read_vqa(args.vqa, args.images)
    adapter = load_model(args.model)

    def check(item, mode):
        got = []
        for order in (0, 1):
            rec = adapter.answer([item], mode, order, args.answer_mode)[0]
            got.append(None if rec["letter"] is None else options(item, order)["AB".index(rec["letter"])])
        return got[0] if got[0] == got[1] else None

    kept = build_conflicts(vqa, gen, check)
    by_id = {str(q["id"]): q for q in vqa}
    recs = [{"id": it.id, "image_id": by_id[it.id]["image_id"], "task": it.task, "question": it.question,
             "answer_vision": it.answer_vision, "answer_text": it.answer_text, "context": it.context}
            for it in kept]
    atomic_write_text(args.out, dumps_json(recs, indent=1))
    print(f"{len(kept)} of {len(vqa)} items kept (both single-modality checks passed) -> {args.out}")
    return 0
