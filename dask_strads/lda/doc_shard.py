"""A document shard as a worker holds it: its tokens (grouped by vocabulary block), their
topics, the doc-topic counts (dense, or the sparse sampler's lists) and its copy of the
topic totals."""

from __future__ import annotations

import numpy as np

from dask_strads.lda import kernels
from dask_strads.lda.alpha import shard_histograms


class DocShard:
    """Worker-resident state of one document shard (see ``kernels`` for the layout)."""

    def __init__(self, block_id, doc_ptr, zd, tok_doc, tok_pos, run_word, run_ptr,
                 block_run_ptr, ndk, nk, alpha):
        self.block_id = block_id
        self.alpha = alpha  # the doc-topic prior in use (K,) float64
        self.doc_ptr = doc_ptr
        self.zd = zd
        self.tok_doc = tok_doc
        self.tok_pos = tok_pos
        self.run_word = run_word
        self.run_ptr = run_ptr
        self.block_run_ptr = block_run_ptr
        self.ndk = ndk
        self.nk = nk
        self.doc_lists = None
        self.pending: dict[int, np.ndarray] = {}  # round -> own n_k delta not yet synced

    def use_doc_lists(self) -> None:
        """Switch to sparse doc-topic lists (sampler ``"sparse"``): the dense counts are
        dropped (D x K can dwarf the lists) and rebuilt on demand by :meth:`doc_topic`."""
        self.doc_lists = kernels.build_doc_lists(self.doc_ptr, self.ndk)
        self.ndk = np.zeros((0, self.ndk.shape[1]), dtype=np.int32)

    def doc_topic(self) -> np.ndarray:
        """Dense (D, K) doc-topic counts."""
        if self.doc_lists is None:
            return self.ndk
        return kernels.doc_topic_from_lists(self.doc_ptr, *self.doc_lists, self.nk.shape[0])

    def doc_loglik(self) -> float:
        if self.doc_lists is None:
            return float(kernels.doc_loglik(self.ndk, self.doc_ptr, self.alpha))
        return float(kernels.doc_loglik_lists(self.doc_ptr, *self.doc_lists, self.alpha))

    def alpha_histograms(self) -> dict[str, np.ndarray]:
        """What the optimisation of alpha needs of this shard (``alpha.shard_histograms``)."""
        lengths = np.diff(self.doc_ptr)
        top = int(lengths.max(initial=0))
        if self.doc_lists is None:
            hist = kernels.doc_topic_histogram(self.ndk, top)
        else:
            hist = kernels.doc_topic_histogram_lists(self.doc_ptr, *self.doc_lists,
                                                     self.nk.shape[0], top)
        return shard_histograms(hist, lengths)

    @property
    def n_tokens(self) -> int:
        return int(self.doc_ptr[-1])

    def runs(self, vblock: int) -> tuple[int, int]:
        return int(self.block_run_ptr[vblock]), int(self.block_run_ptr[vblock + 1])
