"""Users' formats: JSONL / TSV / parquet / ``datasets`` corpora and queries, TREC run and qrels files, evaluation.

Every reader raises ``UserError`` with the file and line for bad input; writers are atomic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from icml26_shared import UserError
from icml26_shared.io import atomic_write_text


def _check_records(ids: list[str], texts: list[str], where: str) -> tuple[list[str], list[str]]:
    if not ids:
        raise UserError(f"{where} is empty")
    seen: dict[str, int] = {}
    for i, d in enumerate(ids):
        if d in seen:
            raise UserError(f"{where}: duplicate id {d!r} (records {seen[d] + 1} and {i + 1})")
        seen[d] = i
    return ids, texts


def _record_id(value, where: str) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise UserError(f"{where}: id must be a string or an integer")
    return str(value)


def _record_text(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: text must be a non-empty string")
    return value


def read_jsonl(path: str | Path, id_field: str = "id", text_field: str = "text") -> tuple[list[str], list[str]]:
    """``{"id", "text"}`` per line (blank lines skipped; other field names with ``id_field`` /
    ``text_field``). Ids may be strings or integers."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    ids, texts = [], []
    with path.open(encoding="utf-8", errors="strict") as f:
        try:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{n}: malformed JSON ({exc.msg})") from None
                if not isinstance(rec, dict) or id_field not in rec or text_field not in rec:
                    raise UserError(f'{path}:{n}: expected an object with "{id_field}" and "{text_field}"')
                ids.append(_record_id(rec[id_field], f"{path}:{n}"))
                texts.append(_record_text(rec[text_field], f"{path}:{n}"))
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
    return _check_records(ids, texts, str(path))


def read_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """MS MARCO's ``collection.tsv`` / ``queries.tsv``: ``id<TAB>text`` per line, no header
    (blank lines skipped; the text is everything after the first tab)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    ids, texts = [], []
    with path.open(encoding="utf-8", errors="strict", newline="") as f:
        try:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                if "\t" not in line:
                    raise UserError(f"{path}:{n}: no tab (expected id<TAB>text)")
                i, t = line.split("\t", 1)
                if not i.strip():
                    raise UserError(f"{path}:{n}: empty id")
                ids.append(i.strip())
                texts.append(_record_text(t, f"{path}:{n}"))
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
    return _check_records(ids, texts, str(path))


def read_parquet(path: str | Path, id_field: str = "id", text_field: str = "text") -> tuple[list[str], list[str]]:
    """A parquet file with an id and a text column (``id_field`` / ``text_field``)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    import pyarrow.parquet as pq  # a dependency of datasets; no torch

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise UserError(f"{path}: not a readable parquet file ({type(exc).__name__})") from None
    missing = [c for c in (id_field, text_field) if c not in schema.names]
    if missing:
        raise UserError(f"{path}: no column(s) {', '.join(missing)} (columns: {', '.join(schema.names)}; "
                        "see --id-field / --text-field)")
    cols = pq.read_table(path, columns=[id_field, text_field]).to_pydict()
    ids = [_record_id(v, f"{path}: row {n}") for n, v in enumerate(cols[id_field], 1)]
    texts = [_record_text(v, f"{path}: row {n}") for n, v in enumerate(cols[text_field], 1)]
    return _check_records(ids, texts, str(path))


FORMATS = ".jsonl / .json (one object per line), .tsv (id<TAB>text), .parquet or a datasets folder"


def read_corpus(path: str | Path, id_field: str = "id", text_field: str = "text") -> tuple[list[str], list[str]]:
    """Ids and texts of a corpus or a query set: JSONL, MS MARCO-style TSV, parquet, or a local
    ``datasets`` folder (``save_to_disk``). Reads and validates everything without torch."""
    path = Path(path)
    if path.is_dir():
        from icml26_shared.data import load_local_dataset

        ds = load_local_dataset(path)
        missing = {id_field, text_field} - set(ds.column_names)
        if missing:
            raise UserError(f"{path}: dataset lacks column(s) {', '.join(sorted(missing))}")
        ids = [_record_id(x, f"{path}: record {i + 1}") for i, x in enumerate(ds[id_field])]
        texts = [_record_text(t, f"{path}: record {i + 1}") for i, t in enumerate(ds[text_field])]
        return _check_records(ids, texts, str(path))
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return read_tsv(path)
    if suffix == ".parquet":
        return read_parquet(path, id_field, text_field)
    if suffix not in (".jsonl", ".json") and path.exists():
        raise UserError(f"{path}: expected {FORMATS}")
    return read_jsonl(path, id_field, text_field)


# --- TREC ---------------------------------------------------------------------------------------


def write_run(path: str | Path, run: Mapping[str, Sequence[tuple[str, float]]], tag: str = "crossq") -> Path:
    """TREC run ``qid Q0 docid rank score tag``, written atomically."""
    path = Path(path)
    lines = [f"{q} Q0 {d} {r} {s:.6f} {tag}" for q, hits in run.items()
             for r, (d, s) in enumerate(hits, 1)]
    return atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""), mkdir=False)


def _lines(path: Path):
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield n, line.split()


def read_scored_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` of a TREC run (the rank column is ignored, as trec_eval does; a
    document listed twice for a query keeps its best score)."""
    path = Path(path)
    rows: dict[str, dict[str, float]] = {}
    for n, f in _lines(path):
        if len(f) != 6:
            raise UserError(f"{path}:{n}: a TREC run line has 6 fields (qid Q0 docid rank score tag)")
        try:
            int(f[3])
            score = float(f[4])
        except ValueError:
            raise UserError(f"{path}:{n}: rank must be an integer and score a number") from None
        if not math.isfinite(score):
            raise UserError(f"{path}:{n}: score must be a finite number")
        hits = rows.setdefault(f[0], {})
        hits[f[2]] = max(score, hits.get(f[2], -math.inf))
    if not rows:
        raise UserError(f"{path} is empty")
    return rows


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Document ids best first as trec_eval orders them: by score, ties by document id in
    *decreasing* string order (trec_eval's ``strcmp(b, a)``)."""
    return sorted(sorted(scores, reverse=True), key=lambda d: -scores[d])


def read_run(path: str | Path) -> dict[str, list[str]]:
    """Document ids per query, best first, in trec_eval's order (see ``trec_order``)."""
    return {q: trec_order(hits) for q, hits in read_scored_run(path).items()}


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TREC qrels ``qid iter docid relevance``."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    for n, f in _lines(path):
        if len(f) != 4:
            raise UserError(f"{path}:{n}: a qrels line has 4 fields (qid iter docid relevance)")
        try:
            rel = int(f[3])
        except ValueError:
            raise UserError(f"{path}:{n}: relevance must be an integer") from None
        qrels.setdefault(f[0], {})[f[2]] = rel
    if not qrels:
        raise UserError(f"{path} is empty")
    return qrels


def _as_scores(hits: Mapping[str, float] | Sequence[str]) -> dict[str, float]:
    """A query's run as ``{docid: score}``: scores as given, or a ranked list (best first) as
    strictly decreasing scores (no ties)."""
    if isinstance(hits, Mapping):
        return {str(d): float(v) for d, v in hits.items()}
    out: dict[str, float] = {}
    for i, d in enumerate(hits):
        out.setdefault(str(d), float(len(hits) - i))
    return out


def evaluate(run: Mapping[str, Mapping[str, float] | Sequence[str]],
             qrels: Mapping[str, Mapping[str, int]], k: int = 10,
             recall_k: Sequence[int] = (10, 100), strict: bool = False) -> dict[str, float]:
    """Mean MRR@k, nDCG@k and recall@k computed by ``ir-measures`` with its ``pytrec_eval``
    provider (trec_eval itself: ties on score ordered by decreasing document id, linear gains,
    log2 discount), over the qrels' queries that have a relevant document (relevance >= 1).

    ``run`` maps each query to ``{docid: score}`` (``read_scored_run``) or to a ranked list of
    ids. trec_eval's ``recip_rank`` has no cutoff, so RR@k is ``recip_rank`` on each query's
    top ``k`` in trec_eval's own order. As ``trec_eval -c``: a judged query the run lacks scores
    0 and counts in the mean; ``strict=True`` refuses such a run instead. Run queries without
    judgments are ignored."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    judged = [q for q, rels in qrels.items() if any(g > 0 for g in rels.values())]
    if not judged:
        raise UserError("the qrels have no relevant documents")
    missing = [q for q in judged if q not in run]
    if missing and strict:
        raise UserError(f"{len(missing)} of {len(judged)} qrels queries are not in the run "
                        f"(e.g. {missing[0]!r}); without --strict they score 0")
    if len(missing) == len(judged):
        raise UserError(f"none of the {len(judged)} qrels queries is in the run: wrong qrels?")
    present = [q for q in judged if q in run]
    qr = [ir_measures.Qrel(q, str(d), int(g)) for q in present for d, g in qrels[q].items()]
    scores = {q: _as_scores(run[q]) for q in present}
    full = [ir_measures.ScoredDoc(q, d, s) for q in present for d, s in scores[q].items()]
    top = [ir_measures.ScoredDoc(q, d, scores[q][d]) for q in present
           for d in trec_order(scores[q])[:k]]
    names = {nDCG @ k: f"ndcg@{k}", **{R @ r: f"recall@{r}" for r in recall_k}}
    sums = {f"mrr@{k}": 0.0, **{v: 0.0 for v in names.values()}}
    provider = ir_measures.pytrec_eval
    for m in provider.iter_calc(list(names), qr, full):
        sums[names[m.measure]] += m.value
    for m in provider.iter_calc([RR], qr, top):
        sums[f"mrr@{k}"] += m.value
    out = {m: v / len(judged) for m, v in sums.items()}
    out = {f"mrr@{k}": out[f"mrr@{k}"], f"ndcg@{k}": out[f"ndcg@{k}"],
           **{f"recall@{r}": out[f"recall@{r}"] for r in recall_k}}
    out["queries"] = float(len(judged))
    out["missing_queries"] = float(len(missing))
    return out
