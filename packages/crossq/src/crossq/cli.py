"""``crossq`` command line: embed, index, search, eval, train, info, bench, reproduce.

Heavy imports (torch, transformers, faiss) happen inside the command functions so that ``--help``
stays instant. Users' mistakes raise ``UserError``: one line on stderr, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    nonneg_int,
    positive_float,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import check_replaceable, print_json

CODEC_NAMES = ("pq", "opq", "rq", "lsq", "tokenwise", "residual", "crossq", "fp16", "int8")
TRAINED = ("crossq", "tokenwise")  # codecs with CrossQ's training (--steps applies)


def _encoder(args):
    from .config import EncoderConfig
    from .encoder import LateInteractionEncoder

    return LateInteractionEncoder.load(EncoderConfig(model=args.model or "minilm", dim=_dim(args),
                                                     doc_maxlen=args.doc_maxlen))


def _dim(args) -> int:
    return 128 if args.dim is None else args.dim


def _stored_encoder(args, ids, texts):
    """``(folder, encoder)`` of ``--embeddings`` (``(None, None)`` without it): the folder is read,
    checked against this corpus, ``--model`` and ``--dim``; a mismatch raises ``UserError``."""
    if args.embeddings is None:
        return None, None
    from .embeddings import StoredEncoder, read_embeddings

    emb = read_embeddings(args.embeddings)
    emb.check_corpus(ids, texts)
    enc = StoredEncoder(emb)
    enc.check(args.model, args.dim)
    return emb, enc


CROSSQ_OPTIONS = ("steps", "lr", "queries_per_step", "candidates")  # CLI flag -> CrossQConfig field


def _crossq_params(args) -> dict:
    """The CrossQ training options given on the command line (unset ones keep the config's)."""
    return {k: getattr(args, k) for k in CROSSQ_OPTIONS if getattr(args, k) is not None}


def _cmd_index(args) -> int:
    from .io import read_corpus

    if args.codec_model is not None and args.codec not in TRAINED:
        raise UserError("--codec-model is for --codec crossq or tokenwise")
    given = [f"--{k.replace('_', '-')}" for k in CROSSQ_OPTIONS if getattr(args, k) is not None]
    if given and (args.codec not in TRAINED or args.codec_model is not None):
        raise UserError(f"{', '.join(given)}: training options for --codec crossq or tokenwise "
                        "fitted here (not with --codec-model, which is already trained)")
    if args.out.exists() and not args.overwrite:
        raise UserError(f"{args.out} exists (pass --overwrite to replace it)")
    check_replaceable(args.out)  # --overwrite replaces only a folder a run wrote
    ids, texts = read_corpus(args.corpus, args.id_field, args.text_field)  # before torch is imported
    emb, enc = _stored_encoder(args, ids, texts)
    from .indexer import build_index

    if args.codec_model is None:  # fail before loading any model (dim = --dim, see README)
        from .codecs import get_codec

        get_codec(args.codec).check_budget(_dim(args) if enc is None else enc.dim, args.bytes_per_token)
    params = _crossq_params(args) if args.codec in TRAINED else {}
    manifest = build_index(ids, texts, args.out, _encoder(args) if enc is None else enc, args.codec,
                           args.bytes_per_token, params, args.codec_model,
                           chunk_docs=args.chunk_docs, fit_docs=args.fit_docs, seed=args.seed,
                           overwrite=args.overwrite, progress=not args.quiet,
                           cells=not args.no_cells, embeddings=emb)
    _print_bytes(manifest)
    print(f"index: {args.out}")
    return 0


def _print_bytes(manifest: dict) -> None:
    b = manifest["bytes"]
    print(f"{manifest['n_docs']} documents, {manifest['n_tokens']} token vectors, codec "
          f"{manifest['codec']['codec']} at {b['bytes_per_token_raw']} B/token "
          f"({b['bytes_per_token_with_metadata']:.2f} with metadata, "
          f"{b['bytes_per_token_on_disk']:.2f} on disk); vs fp32: "
          f"{b['reduction_vs_fp32_raw']:.1f}x raw, {b['reduction_vs_fp32_with_metadata']:.1f}x with metadata")


def _cmd_search(args) -> int:
    from .io import read_corpus, write_run

    if args.out.exists() and not args.overwrite:
        raise UserError(f"{args.out} exists (pass --overwrite to replace it)")
    qids, qtexts = read_corpus(args.queries, args.id_field, args.text_field)  # before torch
    from .index import read_manifest
    from .indexer import search_texts

    read_manifest(args.index)  # a clear error before loading the encoder
    run = search_texts(args.index, qids, qtexts, args.k, args.nprobe, progress=not args.quiet,
                       batch=args.batch, cell_bytes=args.cell_bytes, query_batch=args.query_batch)
    write_run(args.out, run)
    print(f"run: {args.out} ({len(run)} queries, top {args.k})")
    return 0


def _cmd_eval(args) -> int:
    from .io import evaluate, read_qrels, read_scored_run

    metrics = evaluate(read_scored_run(args.run), read_qrels(args.qrels), k=10, recall_k=args.recall_k,
                       strict=args.strict)
    if args.json:
        print_json(metrics, indent=2)
    else:
        for m, v in metrics.items():
            print(f"{m:<16}{v:.4f}" if not m.endswith("queries") else f"{m:<16}{int(v)}")
    return 0


def _cmd_train(args) -> int:
    from .io import read_corpus, read_qrels

    if (args.queries is None) != (args.qrels is None):
        raise UserError("--queries and --qrels go together (training pairs)")
    if args.out.exists() and not args.overwrite:
        raise UserError(f"{args.out} exists (pass --overwrite to replace it)")
    check_replaceable(args.out)  # --overwrite replaces only a folder a run wrote
    ids, texts = read_corpus(args.corpus, args.id_field, args.text_field)  # before torch
    qids = qtexts = qrels = None
    if args.queries is not None:
        qids, qtexts = read_corpus(args.queries, args.id_field, args.text_field)
        qrels = read_qrels(args.qrels)
    emb, senc = _stored_encoder(args, ids, texts)
    from .codecs import get_codec
    from .indexer import save_codec_model, stream_training_data

    get_codec("crossq").check_budget(_dim(args) if senc is None else senc.dim, args.bytes_per_token)
    pairs = None
    if args.queries is not None:
        pos = {i: n for n, i in enumerate(ids)}
        pairs = [(qt, pos[d]) for q, qt in zip(qids, qtexts, strict=True)
                 for d, g in qrels.get(q, {}).items() if g > 0 and d in pos][: args.max_pairs]
        if not pairs:
            raise UserError("no (query, relevant document) pair matches the corpus ids")
    if senc is None:
        enc = _encoder(args)
        dim = enc.dim if enc.projection is not None else min(_dim(args), enc.dim)
    else:  # documents from the folder; the real encoder (with the folder's head) for queries only
        from .encoder import LateInteractionEncoder

        enc = senc if pairs is None else LateInteractionEncoder.from_info(emb.meta["encoder"], emb.projection)
        dim = senc.dim
    codec = get_codec("crossq")(dim, args.bytes_per_token, **_crossq_params(args))
    qh = None if pairs is None else enc.hidden([p[0] for p in pairs], is_query=True)
    # streamed: one chunk of the corpus, the fit sample and the candidates' vectors in memory
    X, off, training = stream_training_data(enc, texts, qh, None if pairs is None else [p[1] for p in pairs],
                                            codec.cfg.candidates, args.chunk_docs, args.fit_docs,
                                            args.seed, embeddings=emb)
    codec.fit(X, off, seed=args.seed, training=training)
    save_codec_model(args.out, codec, enc if senc is None else senc, overwrite=args.overwrite)
    print(f"codec model: {args.out} (use: crossq index CORPUS --codec crossq --codec-model {args.out})")
    return 0


def _cmd_embed(args) -> int:
    from .io import read_corpus

    if args.out.exists() and not args.overwrite:
        raise UserError(f"{args.out} exists (pass --overwrite to replace it)")
    check_replaceable(args.out)
    ids, texts = read_corpus(args.corpus, args.id_field, args.text_field)  # before torch
    from tqdm.auto import tqdm

    from .embeddings import write_embeddings

    enc = _encoder(args)
    with tqdm(total=len(texts), desc="embedding", disable=args.quiet, unit="doc") as bar:
        meta = write_embeddings(args.out, ids, texts, enc, args.chunk_docs, args.fit_docs, args.seed,
                                overwrite=args.overwrite, progress=bar.update)
    print(f"embeddings: {args.out} ({meta['n_docs']} documents, {meta['n_tokens']} token vectors "
          f"of {meta['dim']} dims, fp16; use: crossq index CORPUS --embeddings {args.out})")
    return 0


def _cmd_info(args) -> int:
    from .index import disk_report, read_manifest

    manifest = read_manifest(args.index)
    if args.json:
        print_json(disk_report(args.index, manifest), indent=2)
    else:
        _print_bytes(manifest)
    return 0


def _cmd_bench(args) -> int:
    import torch

    from .bench import run_bench
    from .index import Index

    torch.set_num_threads(args.threads)
    index = Index.open(args.index) if args.index is not None else None
    rows = run_bench(args.tokens, args.bytes_per_token, args.dim, args.queries, args.query_len,
                     args.nprobe, args.batch, args.repeats, index, cell_bytes=args.cell_bytes)
    for r in rows:
        print_json(r, indent=None)
    return 0


def _field_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id-field", default="id", help="JSONL / parquet / datasets: the id column")
    p.add_argument("--text-field", default="text", help="JSONL / parquet / datasets: the text column")


def _encoder_args(p: argparse.ArgumentParser, training: bool = True) -> None:
    _field_args(p)
    p.add_argument("--model", default=None,
                   help="'minilm' (all-MiniLM-L6-v2, offline; the default) or a local HF / ColBERT / "
                        "PyLate folder")
    p.add_argument("--dim", type=positive_int, default=None,
                   help="token dim, default 128 (PCA-fitted when the model has no projection head)")
    p.add_argument("--doc-maxlen", type=positive_int, default=128)
    p.add_argument("--fit-docs", type=positive_int, default=2000,
                   help="documents used to fit the codec")
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    if not training:
        return
    p.add_argument("--steps", type=nonneg_int, default=None,
                   help="CrossQ / token-wise training steps")
    p.add_argument("--lr", type=positive_float, default=None, help="CrossQ / token-wise Adam learning rate")
    p.add_argument("--queries-per-step", type=positive_int, default=None,
                   help="CrossQ / token-wise training queries per Adam step")
    p.add_argument("--candidates", type=positive_int, default=None,
                   help="CrossQ / token-wise: teacher top-N documents per training query")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="crossq", description="CrossQ (ICML 2026): compressed late-interaction retrieval. "
                                   "Not the CrossQ reinforcement-learning algorithm.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("index", help="encode and compress a corpus into an index directory")
    p.add_argument("corpus", type=Path, help="JSONL, TSV (id<TAB>text), parquet or a datasets folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--codec", choices=CODEC_NAMES, default="crossq")
    p.add_argument("--bytes-per-token", type=positive_int, default=None)
    p.add_argument("--codec-model", type=Path, default=None, help="a folder from `crossq train`")
    p.add_argument("--chunk-docs", type=positive_int, default=256)
    p.add_argument("--embeddings", type=Path, default=None,
                   help="a folder from `crossq embed` of this corpus: no re-encoding")
    p.add_argument("--no-cells", action="store_true",
                   help="pq/opq/lsq/fp16/int8: store no k-means candidate cells (no --nprobe)")
    _encoder_args(p)
    p.set_defaults(fn=_cmd_index)
    p = sub.add_parser("embed", help="encode a corpus once into fp16 token vectors (for index --embeddings)")
    p.add_argument("corpus", type=Path, help="JSONL, TSV (id<TAB>text), parquet or a datasets folder")
    p.add_argument("--out", type=Path, required=True, help="embeddings folder")
    p.add_argument("--chunk-docs", type=positive_int, default=256)
    _encoder_args(p, training=False)
    p.set_defaults(fn=_cmd_embed)
    p = sub.add_parser("search", help="top-k MaxSim on the compressed codes, as a TREC run")
    p.add_argument("index", type=Path)
    p.add_argument("queries", type=Path, help="JSONL, TSV (id<TAB>text), parquet or a datasets folder")
    _field_args(p)
    p.add_argument("--k", type=positive_int, default=10)
    p.add_argument("--nprobe", type=nonneg_int, default=0,
                   help="candidate search: coarse cells per query token (0 = exhaustive)")
    p.add_argument("--cell-bytes", type=int, choices=(1, 2), default=None,
                   help="code bytes naming a coarse cell (default: 2 from 2^20 tokens, else 1)")
    p.add_argument("--batch", type=positive_int, default=65536,
                   help="token vectors scored at once (memory ~ query tokens x batch x 4 bytes)")
    p.add_argument("--query-batch", type=positive_int, default=8,
                   help="queries scored together (each block of codes read once for all of "
                        "them, blocks of batch / this token vectors; same run as 1)")
    p.add_argument("--out", type=Path, required=True, help="TREC run file")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=_cmd_search)
    p = sub.add_parser("eval", help="MRR@10, nDCG@10 and recall@k of a TREC run")
    p.add_argument("run", type=Path)
    p.add_argument("qrels", type=Path)
    p.add_argument("--recall-k", type=positive_int, nargs="+", default=[10, 100])
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="refuse a run that lacks judged queries (default: they score 0, as trec_eval -c)")
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("train", help="fit a CrossQ codec on a corpus (pseudo-queries or given pairs)")
    p.add_argument("corpus", type=Path)
    p.add_argument("--out", type=Path, required=True, help="codec model folder")
    p.add_argument("--bytes-per-token", type=positive_int, default=4)
    p.add_argument("--queries", type=Path, default=None, help="training queries (JSONL, TSV, parquet)")
    p.add_argument("--qrels", type=Path, default=None, help="their TREC qrels")
    p.add_argument("--max-pairs", type=positive_int, default=5000)
    p.add_argument("--chunk-docs", type=positive_int, default=256,
                   help="documents read at a time (the corpus is streamed)")
    p.add_argument("--embeddings", type=Path, default=None,
                   help="a folder from `crossq embed` of this corpus: no re-encoding of documents")
    _encoder_args(p)
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser("info", help="an index's size and bytes per token")
    p.add_argument("index", type=Path)
    p.add_argument("--json", action="store_true",
                   help="bytes per token split into codes, codebooks, offsets, ids, other")
    p.set_defaults(fn=_cmd_info)
    p = sub.add_parser("bench", help="query latency and peak memory at given index sizes")
    p.add_argument("--index", type=Path, default=None, help="an index to tile (default: synthetic)")
    p.add_argument("--tokens", type=positive_int, nargs="+", default=[100_000, 3_000_000])
    p.add_argument("--bytes-per-token", type=positive_int, default=4)
    p.add_argument("--dim", type=positive_int, default=128)
    p.add_argument("--queries", type=positive_int, default=8)
    p.add_argument("--query-len", type=positive_int, default=32)
    p.add_argument("--nprobe", type=positive_int, default=4)
    p.add_argument("--batch", type=positive_int, default=65536)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads")
    p.add_argument("--cell-bytes", type=int, choices=(1, 2), default=None,
                   help="code bytes naming a coarse cell (default: 2 from 2^20 tokens, else 1)")
    p.set_defaults(fn=_cmd_bench)
    p = sub.add_parser("reproduce", help="the paper's claims at laptop scale (see README)")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["crossq"], a))
    return parser


@cli_entry("crossq")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
