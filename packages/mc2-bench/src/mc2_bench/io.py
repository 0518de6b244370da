"""Users' formats: the authors' MC2 JSON (read as is, never shipped), digits conflict sets in the
same format, per-item JSONL, and atomic writes (temp file, then rename)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import atomic_write_text, dumps_json

from .core import MC2Item

IMAGE_EXTS = (".jpg", ".jpeg", ".png")


def write_jsonl(path, records: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(dumps_json(r, indent=None) + "\n" for r in records))


EXISTS = "{path} already exists (choose another path; nothing was overwritten)"


def refuse_existing(*paths) -> None:
    for p in paths:
        if p is not None and Path(p).exists():
            raise UserError(EXISTS.format(path=p))


def _image_path(image_id, image_root: Path) -> Path | None:
    sid = str(image_id)
    cands = []
    if sid.isdigit():
        num = sid.zfill(12)
        cands += [image_root / "val2014" / f"COCO_val2014_{num}.jpg",
                  image_root / "train2014" / f"COCO_train2014_{num}.jpg",
                  image_root / f"COCO_val2014_{num}.jpg", image_root / f"COCO_train2014_{num}.jpg"]
    cands += [image_root / (sid + e) for e in IMAGE_EXTS] + [image_root / sid]
    return next((c for c in cands if c.is_file()), None)


def _field(rec: dict, *names):
    for n in names:
        if n in rec:
            return rec[n]
    return None


def load_mc2(json_path, image_root) -> list[MC2Item]:
    """The authors' file as is [C]: a JSON list (or JSONL) of records with ``answer_vision`` /
    ``answer_text`` / ``context`` or ``gt`` / ``hitem`` / ``context.icc``; ``image_id`` as a
    12-digit COCO id (``val2014/COCO_val2014_<id>.jpg``, ``train2014/...``) or ``<id>.<ext>``.
    A missing image raises ``UserError`` naming the item."""
    json_path, image_root = Path(json_path), Path(image_root)
    if not json_path.is_file():
        raise UserError(f"{json_path} does not exist")
    if not image_root.is_dir():
        raise UserError(f"image folder {image_root} does not exist")
    text = json_path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise UserError(f"{json_path}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):
        data = data.get("data", list(data.values()))
    if not isinstance(data, list) or not data:
        raise UserError(f"{json_path}: expected a non-empty list of items")
    items = []
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise UserError(f"{json_path}: item {i} is not an object")
        ctx = _field(rec, "context")
        if isinstance(ctx, dict):
            ctx = ctx.get("icc")
        av, at = _field(rec, "answer_vision", "gt"), _field(rec, "answer_text", "hitem")
        iid = _field(rec, "image_id", "image")
        q = _field(rec, "question")
        missing = [n for n, x in (("image_id", iid), ("question", q), ("answer_vision/gt", av),
                                  ("answer_text/hitem", at), ("context", ctx)) if x is None]
        if missing:
            raise UserError(f"{json_path}: item {i} lacks {', '.join(missing)}")
        item_id = str(_field(rec, "id", "question_id") or f"{iid}-{i}")
        img = _image_path(iid, image_root)
        if img is None:
            raise UserError(f"item {item_id}: image {iid} not found under {image_root}")
        items.append(MC2Item(item_id, str(rec.get("task", "unknown")), str(q), str(av), str(at),
                             str(ctx), str(img)))
    return items


def items_to_records(items: Sequence[MC2Item], image_root) -> list[dict]:
    root = Path(image_root)
    return [{"id": it.id, "image_id": Path(it.image).stem if Path(it.image).parent == root else it.image,
             "task": it.task, "question": it.question, "answer_vision": it.answer_vision,
             "answer_text": it.answer_text, "context": it.context} for it in items]


def build_conflicts(vqa_items: Iterable[dict], generator: Callable[[dict], tuple[str, str]],
                    check: Callable[[MC2Item, str], str | None]) -> list[MC2Item]:
    """MC2 construction [C + R]: for each VQA item (id, image, question, answer, task) the
    ``generator`` writes (counterfactual answer, supporting context); ``check(item, mode)`` returns
    the model's answer under ``base_image`` / ``base_text``. An item is kept only when the image
    alone gives the vision answer and the text alone gives the text answer."""
    kept = []
    for q in vqa_items:
        a_t, ctx = generator(q)
        if not a_t or a_t == q["answer"]:
            continue
        it = MC2Item(str(q["id"]), str(q.get("task", "unknown")), q["question"], q["answer"], a_t,
                     ctx, str(q.get("image", "")))
        if check(it, "base_image") == it.answer_vision and check(it, "base_text") == it.answer_text:
            kept.append(it)
    return kept
