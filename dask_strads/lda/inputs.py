"""The document-term counts of an LDA fit: validation that names the argument at fault,
documents cut into shards balanced by tokens (CSR, on the client for local input, on the
workers for a dask array), and the shards grouped onto blocks."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from distributed import Future

from dask_strads.engine.cluster import workers_of
from dask_strads.lda.partition import partition_documents


def _is_dask_collection(x) -> bool:
    return hasattr(x, "__dask_graph__") and callable(x.__dask_graph__)


def _is_dataframe(x) -> bool:
    return hasattr(x, "columns") and hasattr(x, "dtypes")


def _is_pydata_sparse(x) -> bool:
    return type(x).__module__.split(".")[0] == "sparse" and hasattr(x, "to_scipy_sparse")


def _check_counts_dtype(dtype, name: str) -> None:
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # pandas extension dtypes (strings, categories, ...)
        kind = "O"
    if kind not in "biuf":
        raise TypeError(f"{name}: expected non-negative integer counts, got dtype {dtype}")


def _as_counts(values: np.ndarray, name: str) -> np.ndarray:
    """Validate count values (any array) and return them as int64."""
    values = np.asarray(values)
    _check_counts_dtype(values.dtype, name)
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            raise ValueError(f"{name}: expected non-negative integer counts, found NaN or inf")
        frac = values != np.round(values)
        if frac.any():
            raise ValueError(f"{name}: expected non-negative integer counts, found the "
                             f"non-integer value {values[frac].flat[0]!r}")
    if values.size and values.min() < 0:
        raise ValueError(f"{name}: expected non-negative integer counts, found the negative "
                         f"value {values.min()!r}")
    return values.astype(np.int64)


def _csr_counts(X, name: str = "X") -> sp.csr_matrix:
    """Local inputs (numpy, scipy.sparse, sparse.COO) -> validated CSR int64 counts."""
    if _is_pydata_sparse(X):
        X = X.to_scipy_sparse()
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d matrix, got {X.ndim} dimension(s)")
        X = sp.csr_matrix(X)
        X.sum_duplicates()
        X = sp.csr_matrix((_as_counts(X.data, name), X.indices, X.indptr), shape=X.shape)
    else:
        X = np.asarray(X)
        if X.dtype.kind in "USO" and X.ndim == 1:  # the documents themselves
            raise TypeError(f"{name}: expected word counts (documents x words), got "
                            f"{X.shape[0]} texts; count their words first, e.g. with "
                            "sklearn.feature_extraction.text.CountVectorizer().fit_transform")
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d array (documents x words), got shape "
                             f"{X.shape}")
        X = sp.csr_matrix(_as_counts(X, name))
    X.eliminate_zeros()
    return X


def _frame_counts(df, name: str = "X", n_words: int | None = None) -> sp.csr_matrix:
    """A (dask or pandas) dataframe with columns doc, word, count -> CSR counts.

    The three columns are computed to the client (they hold as many rows as the
    corpus has non-zero counts, i.e. the size of the CSR matrix itself).
    """
    cols = list(df.columns)
    missing = [c for c in ("doc", "word", "count") if c not in cols]
    if missing:
        shown = cols if len(cols) <= 8 else cols[:8] + [f"... {len(cols)} in all"]
        raise ValueError(f"{name}: a dataframe input holds triplets, in columns 'doc', "
                         f"'word', 'count'; missing {missing} (columns are {shown}). A "
                         "documents x words table of counts: pass it as an array "
                         "(DataFrame.to_numpy() or a scipy.sparse matrix)")
    for c in ("doc", "word", "count"):
        _check_counts_dtype(df.dtypes[c], f"{name}['{c}']")
    if _is_dask_collection(df):
        df = df[["doc", "word", "count"]].compute()
    doc = _as_counts(df["doc"].to_numpy(), f"{name}['doc']")
    word = _as_counts(df["word"].to_numpy(), f"{name}['word']")
    count = _as_counts(df["count"].to_numpy(), f"{name}['count']")
    n_docs = int(doc.max()) + 1 if doc.size else 0
    V = n_words if n_words is not None else (int(word.max()) + 1 if word.size else 0)
    if word.size and word.max() >= V:
        raise ValueError(f"{name}['word']: word id {int(word.max())} out of range for "
                         f"{V} words")
    X = sp.csr_matrix((count, (doc, word)), shape=(n_docs, V))
    X.sum_duplicates()
    X.eliminate_zeros()
    return X


def _chunk_to_csr(chunk) -> sp.csr_matrix:
    """Worker side: one row chunk of a dask array -> validated CSR counts."""
    return _csr_counts(chunk, "X")


def _chunk_stats(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Worker side: tokens per document and per word of one chunk."""
    return np.asarray(X.sum(axis=1)).ravel(), np.asarray(X.sum(axis=0)).ravel()


def _stack_shard(*chunks, rows: tuple[int, int]):
    """The CSR arrays of rows ``rows[0]:rows[1]`` of ``chunks`` stacked."""
    X = sp.vstack(chunks, format="csr") if len(chunks) > 1 else chunks[0]
    X = X[rows[0]:rows[1]]
    return X.indptr, X.indices, X.data


def _csr_shard(X: sp.csr_matrix, lo: int, hi: int):
    part = X[lo:hi]
    return part.indptr, part.indices, part.data


def _shard_list(*shards) -> list:
    return list(shards)


def _group(client, pieces: dict, n_blocks: int, threads: int) -> dict:
    """Block ``p``'s data: piece ``p`` with one thread per block, else pieces ``p T`` to
    ``p T + T - 1`` (futures: one future of their list, on the cluster)."""
    if len(pieces) != n_blocks * threads:
        raise RuntimeError(f"dask_strads: {len(pieces)} document shards for {n_blocks} blocks "
                           f"of {threads} threads")
    if threads == 1:
        return dict(pieces)
    out = {}
    for p in range(n_blocks):
        members = [pieces[p * threads + t] for t in range(threads)]
        out[p] = (client.submit(_shard_list, *members, pure=False)
                  if isinstance(members[0], Future) else members)
    return out


def _fewest_threads(client) -> int:
    """The threads of the worker with the fewest (1 without workers yet)."""
    return min((int(w.get("nthreads") or 1) for w in workers_of(client).values()), default=1)


def _delayed_csr(chunk):
    from dask import delayed

    return delayed(_chunk_to_csr, pure=True)(chunk)


def _local_counts(X):
    """Validate and convert a local input (also the local faces of dask inputs)."""
    if _is_dataframe(X):
        return _frame_counts(X)
    return _csr_counts(X)


def _prepare_corpus(X, client, n_blocks: int):
    """Shards (local or futures), tokens per word, the shards' document bounds and the
    corpus shape."""
    if _is_dask_collection(X) and not _is_dataframe(X):
        return _prepare_dask_corpus(X, client, n_blocks)
    Xc = _local_counts(X)
    n_docs, n_words = Xc.shape
    _check_shape(n_docs, n_words, int(Xc.data.sum()))
    P = max(1, min(n_blocks, n_docs, n_words))
    bounds = partition_documents(np.asarray(Xc.sum(axis=1)).ravel(), P)
    shards = {p: _csr_shard(Xc, int(bounds[p]), int(bounds[p + 1])) for p in range(P)}
    return shards, np.asarray(Xc.sum(axis=0)).ravel(), bounds, n_docs, n_words


def _check_dask_array(X) -> None:
    """Everything knowable about a dask array without computing it."""
    _check_counts_dtype(X.dtype, "X")
    if X.ndim != 2:
        raise ValueError(f"X: expected a 2-d array (documents x words), got {X.ndim} "
                         "dimension(s)")
    if any(math.isnan(c) for c in X.chunks[0]) or any(math.isnan(c) for c in X.chunks[1]):
        raise ValueError("X: dask array with unknown chunk sizes; call "
                         "X.compute_chunk_sizes() first")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X: found shape {X.shape}; at least 1 document and 1 word are "
                         "required")


def _prepare_dask_corpus(X, client, n_blocks: int):
    """Row chunks become CSR on the workers, cut into ``n_blocks`` shards of about equal
    token counts at the same documents as a corpus in memory (so that the draws do not
    depend on the chunks); only the per-word and per-document totals reach the client.
    Bad values fail this one pass (the workers' error names ``X``) and leave no keys."""
    n_docs, n_words = X.shape
    X = X.rechunk({1: -1})
    chunks = list(X.to_delayed().ravel())
    csr = client.compute([_delayed_csr(c) for c in chunks])
    stat_futures = [client.submit(_chunk_stats, f, pure=False) for f in csr]
    try:
        stats = client.gather(stat_futures)
        doc_lengths = np.concatenate([s[0] for s in stats]).astype(np.int64)
        word_counts = np.sum([s[1] for s in stats], axis=0).astype(np.int64)
        _check_shape(n_docs, n_words, int(doc_lengths.sum()))
    except BaseException:
        for f in csr + stat_futures:
            f.release()
        raise
    for f in stat_futures:
        f.release()
    P = max(1, min(n_blocks, n_docs, n_words))
    bounds = partition_documents(doc_lengths, P)
    rows = np.concatenate(([0], np.cumsum([len(s[0]) for s in stats])))
    shards = {}
    for p in range(P):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        first = min(int(np.searchsorted(rows, lo, side="right")) - 1, len(csr) - 1)
        last = max(first + 1, int(np.searchsorted(rows, hi, side="left")))
        cut = (lo - int(rows[first]), hi - int(rows[first]))
        shards[p] = client.submit(_stack_shard, *csr[first:last], rows=cut, pure=False)
    return shards, word_counts, bounds, n_docs, n_words


def _check_shape(n_docs: int, n_words: int, n_tokens: int) -> None:
    if n_docs < 1 or n_words < 1:
        raise ValueError(f"X: found shape ({n_docs}, {n_words}); at least 1 document and "
                         "1 word are required")
    if n_tokens < 1:
        raise ValueError("X: the corpus has no tokens (all counts are zero)")
