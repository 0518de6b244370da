"""faiss, imported once with a fixed thread count: OpenMP busy-waiting on a shared 2-core machine
makes k-means 30x slower with 2 threads than with 1. ``CROSSQ_FAISS_THREADS`` overrides."""

from __future__ import annotations

import os


def load_faiss():
    import faiss

    faiss.omp_set_num_threads(int(os.environ.get("CROSSQ_FAISS_THREADS", "1")))
    return faiss
