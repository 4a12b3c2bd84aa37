"""scikit-learn estimator ``LDA`` (``LatentDirichletAllocation``) on the STRADS engine.

The estimator takes the document-term counts as :mod:`dask_strads.lda.inputs` checks
and shards them, splits the vocabulary into blocks balanced by token count, builds an
:class:`~dask_strads.lda.program.LDAProgram` (word rotation) and runs it; the fitted
attributes are plain numpy values, except :meth:`LDA.word_topic_dask` for tables too
large to gather.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dask_strads import config
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine import run
from dask_strads.engine.cluster import (
    PicklesWithoutClient,
    cluster_client,
    worker_count,
    workers_of,
)
from dask_strads.lda import kernels
from dask_strads.lda.inputs import (
    _check_counts_dtype,
    _check_dask_array,
    _check_shape,
    _csr_counts,
    _fewest_threads,
    _frame_counts,
    _group,
    _is_dask_collection,
    _is_dataframe,
    _local_counts,
    _prepare_corpus,
)
from dask_strads.lda.program import (
    SAMPLERS,
    LDAProgram,
    as_alpha,
    partition_vocabulary,
)

__all__ = ["LDA", "LatentDirichletAllocation"]


# "auto"'s cost model of the samplers, in relative time per token of exact Gibbs's
# progress (see _sampler_costs): dense Gibbs pays a fixed part plus a little per topic;
# sparse Gibbs a larger fixed part (its doc lists and buckets) plus a little per non-zero
# topic of the document; MH a fixed cost per sweep, times the sweeps it needs for one of
# exact Gibbs (its mixing factor, which grows with K: bench/lda_mixing.py).
_DENSE_COST = (40.0, 0.55)
_SPARSE_COST = (100.0, 0.5)
_MH_COST = 90.0
_MH_MIXING = (2.0, 0.8)  # factor = a + b * log10(K / 100), at least 1


def _sampler_costs(n_topics: int, mean_doc_length: float) -> dict[str, float]:
    """Estimated cost per token of each sampler, for the same progress per token: ``a +
    b * K`` for ``"dense"``, ``a + b * min(K, mean document length)`` for ``"sparse"``
    (a document has at most that many non-zero topics), a constant times the mixing
    factor for ``"mh"``."""
    mixing = max(1.0, _MH_MIXING[0] + _MH_MIXING[1] * math.log10(max(n_topics, 1) / 100))
    return {"dense": _DENSE_COST[0] + _DENSE_COST[1] * n_topics,
            "sparse": _SPARSE_COST[0] + _SPARSE_COST[1] * min(n_topics, mean_doc_length),
            "mh": _MH_COST * mixing}


def _transport() -> str:
    """How the vocabulary blocks travel between sub-rounds (``dask-strads.lda.transport``)."""
    value = config.get("lda.transport")
    if value not in ("direct", "tasks"):
        raise ValueError(f"dask-strads.lda.transport: expected 'direct' or 'tasks', got "
                         f"{value!r}")
    return value


class LDA(PicklesWithoutClient, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
          BaseEstimator):
    """Latent Dirichlet Allocation by collapsed sampling with word rotation.

    Documents are split into shards that stay on their workers; the vocabulary into
    blocks balanced by token count, whose word-topic counts rotate worker to worker:
    in each sub-round every worker samples its tokens of the one vocabulary block it
    holds, so no two workers ever update the same word and each worker holds only
    ``1 / n_blocks`` of the model. The topic totals are the only shared state.

    Parameters
    ----------
    n_components : int, default=10
        Number of topics K.
    doc_topic_prior : float, array-like of shape (n_components,) or None, default=0.1
        Dirichlet prior alpha on the document-topic distributions: a number (symmetric),
        one positive number per topic (asymmetric), or None for ``1 / n_components``
        (scikit-learn's default). With ``optimize_interval`` the starting value.
    topic_word_prior : float, default=0.01
        Symmetric Dirichlet prior beta on the topic-word distributions.
    max_iter : int, default=100
        Iterations (each one samples every token once: a full rotation).
    random_state : int, RandomState instance or None, default=None
        Seed of the initial topics and of the sampler.
    n_blocks : int or None, default=None
        Document shards = vocabulary blocks (P). None: one per worker. More blocks than
        workers smooths the load at the price of more sub-rounds per iteration.
    block_threads : int or None, default=None
        Threads that sample each block at once (T): the documents and the vocabulary are
        cut into ``n_blocks x T`` pieces, and a block's T threads rotate its vocabulary
        block's T pieces among themselves inside each sub-round, with no message between
        them. None: the fewest threads any worker has. One worker of T threads per node
        thus makes one sub-round per node and iteration, not one per core. The draws
        depend on ``n_blocks`` and T, not on which workers run them.
    sync_every : int, default=1
        Sub-rounds between two syncs of the topic totals (every rotation starts with
        one). Larger values send less but let each worker's copy of the totals drift
        further from the global ones during a rotation.
    sampler : {"auto", "dense", "mh", "sparse", "gibbs"}, default="auto"
        ``"mh"``: exact Metropolis-Hastings with doc and word proposals (LightLDA's
        cycle), O(1) per token whatever K, with dense doc-topic counts (documents x K
        int32 per shard); it mixes less per sweep than Gibbs but more per second.
        ``"sparse"``: exact collapsed Gibbs with a sparse doc bucket and two-level sums
        over the word's topic weights, O(non-zero topics of the document) per token,
        with sparse doc-topic lists (memory O(tokens)). ``"dense"``: exact collapsed
        Gibbs over all K topics with the word's distribution kept current, O(K) per token
        in vectorised multiply-adds, the fastest for small K and short documents.
        ``"gibbs"``: plain collapsed Gibbs, O(K) per token (the reference). ``"auto"``:
        the cheapest by a cost model per token (dense: a fixed part plus one per topic;
        sparse: a larger fixed part plus one per non-zero topic of a document, at most
        its mean length; MH: a constant, times the sweeps it needs for one of exact
        Gibbs, which grow with K), restricted to
        ``"sparse"`` when the dense doc-topic counts of a shard would take more than a
        tenth of a worker's memory limit (1 GB without a limit). Short documents and
        small K pick ``"dense"``, long documents and large K ``"mh"``. The sampler used
        is ``sampler_``.
    mh_steps : int, default=2
        Doc + word proposal pairs per token (``"mh"``); more mixes faster per sweep.
    optimize_interval : int, default=0
        Learn an asymmetric alpha (one value per topic) as MALLET and tomotopy do:
        after every iteration ``it > optimize_burn_in`` with ``it % optimize_interval ==
        0``, Minka's fixed-point update (10 steps, each ``alpha_k`` at least 1e-5) from
        histograms of the doc-topic counts each worker returns; the new alpha takes
        effect at the start of the next iteration (with ``staleness`` s, of the first one
        at least s + 1 sub-rounds later). 0: alpha stays fixed.
    optimize_burn_in : int, default=10
        Iterations before the first update of alpha (``optimize_interval > 0``).
    staleness : int, default=0
        Sub-rounds in flight beyond the one being pulled (hides the round trip).
    transform_iter : int, default=50
        Gibbs sweeps of :meth:`transform` per document (the second half is averaged).
    gather_model : bool, default=True
        Gather the word-topic table to the client at the end of ``fit`` (sets
        ``components_``). With False the table stays on the cluster in its vocabulary
        blocks and is reached through :meth:`word_topic_dask` (for tables too large for
        the client).
    client : distributed.Client or None, default=None
        Cluster to fit on; defaults to the current client, else an embedded
        ``LocalCluster`` for the call.
    progress : bool, default=True
        Show a progress bar of sub-rounds (on by default, as for the other estimators).
    checkpoint : path, optional
        Directory for atomic checkpoints of the fit (``.npz``, loaded without pickle);
        continue an interrupted fit with ``fit(X, resume=checkpoint)``. A checkpoint holds
        every token's topic and the word-topic table, i.e. about 16 bytes per token.
    checkpoint_every : int, optional
        Sub-rounds between checkpoints (``n_blocks`` sub-rounds make one iteration;
        default: about every ``dask-strads.engine.snapshot-interval``, 20 s). Without
        ``checkpoint`` the snapshots stay in memory, for recovery from lost workers.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Topic-word pseudo-counts ``n_wk + topic_word_prior`` (as scikit-learn's).
    loglikelihoods_ : ndarray of shape (n_iter_,)
        Complete-data log-likelihood ``log p(w, z)`` after every iteration (the ``lda``
        package's definition).
    history_ : pandas.DataFrame
        The engine's per-round history (timings, log-likelihood, tokens sampled).
    n_iter_ : int
        Iterations run.
    n_tokens_ : int
        Tokens in the training corpus.
    sampler_ : str
        The sampler the fit used (``sampler``, or what ``"auto"`` chose).
    doc_topic_prior_ : ndarray of shape (n_components,)
        The alpha in use at the end of the fit (``doc_topic_prior`` as an array, or the
        learned one with ``optimize_interval``); :meth:`transform`, :meth:`score` and
        :meth:`perplexity` use it.
    doc_topic_ : ndarray of shape (n_samples, n_components)
        Set by :meth:`fit_transform`: the training documents' topic distributions
        ``(n_dk + alpha_k) / (n_d + sum alpha)`` at the last iteration.
    recoveries_ : list of dict
        One entry per recovery from lost workers during the fit: the sub-round it
        restarted from (``round``), the workers lost (``lost``) and the time it took
        (``seconds``).
    handovers_ : list of dict
        One entry per handover of gracefully retired workers' blocks during the fit (no
        sub-round runs again): the sub-round (``round``), the retired workers
        (``workers``) and the time it took (``seconds``).

    Notes
    -----
    Every draw of the sampler is seeded from ``random_state``, the iteration, the
    sub-round and the document shard. A fit that recovers from a lost worker, or one
    resumed from a checkpoint, therefore continues the same chain and ends with the same
    counts as an undisturbed fit with the same seed and ``n_blocks`` (the resumed fit
    takes both from the checkpoint).

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads import LDA
    >>> from dask_strads._datasets.lda import make_lda_corpus
    >>> X, _ = make_lda_corpus(200, 100, 5, doc_length=50, random_state=0)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     lda = LDA(n_components=5, max_iter=20, random_state=0, client=client).fit(X)
    >>> lda.components_.shape
    (5, 100)
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "doc_topic_prior": [Interval(numbers.Real, 0, None, closed="neither"), "array-like",
                            None],
        "topic_word_prior": [Interval(numbers.Real, 0, None, closed="neither")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "n_blocks": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "block_threads": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "sync_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "sampler": [StrOptions({"auto", *SAMPLERS})],
        "mh_steps": [Interval(numbers.Integral, 1, None, closed="left")],
        "optimize_interval": [Interval(numbers.Integral, 0, None, closed="left")],
        "optimize_burn_in": [Interval(numbers.Integral, 0, None, closed="left")],
        "staleness": [Interval(numbers.Integral, 0, None, closed="left")],
        "transform_iter": [Interval(numbers.Integral, 2, None, closed="left")],
        "gather_model": ["boolean"],
        "client": "no_validation",
        "progress": ["boolean"],
        "checkpoint": "no_validation",
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left"), None],
    }

    def __init__(self, n_components=10, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=100,
                 random_state=None, *, n_blocks=None, block_threads=None, sync_every=1,
                 sampler="auto", mh_steps=2, optimize_interval=0, optimize_burn_in=10,
                 staleness=0, transform_iter=50, gather_model=True, client=None,
                 progress=True, checkpoint=None, checkpoint_every=None):
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.max_iter = max_iter
        self.random_state = random_state
        self.n_blocks = n_blocks
        self.block_threads = block_threads
        self.sync_every = sync_every
        self.sampler = sampler
        self.mh_steps = mh_steps
        self.optimize_interval = optimize_interval
        self.optimize_burn_in = optimize_burn_in
        self.staleness = staleness
        self.transform_iter = transform_iter
        self.gather_model = gather_model
        self.client = client
        self.progress = progress
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    # -------------------------------------------------------------- fit
    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return int(np.random.SeedSequence().entropy % (2**63))
        if isinstance(rs, numbers.Integral):
            return int(rs)
        return int(rs.randint(2**31 - 1))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, resume=None):
        """Fit the topic model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, sparse.COO, dask.array (dense or sparse
            chunks) of shape (n_samples, n_features), or a (dask) dataframe with
            columns ``doc``, ``word``, ``count``
            Document-term counts (non-negative integers).
        y : ignored
        resume : path, optional
            Continue from the checkpoint in this directory (written by a fit of the same
            corpus with ``checkpoint=``). The seed and the number of blocks are the
            checkpoint's, and so is the learned alpha with ``optimize_interval > 0`` (with 0
            the fit goes on with ``doc_topic_prior``); ``max_iter`` counts from the start of
            the checkpointed fit.

        Returns
        -------
        self
        """
        self._fit(X, return_doc_topic=False, resume=resume)
        return self

    def fit_transform(self, X, y=None, *, resume=None):
        """Fit, and return the training documents' topic distributions (``doc_topic_``).

        ``resume`` is as for :meth:`fit`.
        """
        self._validate_params()
        self._fit(X, return_doc_topic=True, resume=resume)
        return self.doc_topic_

    def _resume_settings(self, resume) -> tuple[dict, int, int, int]:
        """The checkpointed fit's client state, seed, number of blocks and threads per
        block (read before any cluster work)."""
        arrays = ckpt.read_state(resume)
        if not {"seed", "block_words", "n_topics"} <= set(arrays):
            raise ValueError(f"resume: the checkpoint in {str(resume)!r} is not one of an LDA "
                             "fit")
        threads = int(arrays.get("threads", 1))
        seed, n_blocks = int(arrays["seed"]), len(np.asarray(arrays["block_words"])) // threads
        if int(arrays["n_topics"]) != self.n_components:
            raise ValueError(f"n_components: the checkpoint in {str(resume)!r} has "
                             f"{int(arrays['n_topics'])} topics, got {self.n_components}")
        rs = self.random_state
        if isinstance(rs, numbers.Integral) and int(rs) != seed:
            raise ValueError(f"random_state: the checkpoint in {str(resume)!r} was written "
                             f"with seed {seed}, got {rs!r} (leave it None to use the "
                             "checkpoint's)")
        if self.n_blocks is not None and self.n_blocks != n_blocks:
            raise ValueError(f"n_blocks: the checkpoint in {str(resume)!r} has {n_blocks} "
                             f"blocks, got {self.n_blocks!r} (leave it None to use the "
                             "checkpoint's)")
        if self.block_threads is not None and self.block_threads != threads:
            raise ValueError(f"block_threads: the checkpoint in {str(resume)!r} has {threads} "
                             f"threads per block, got {self.block_threads!r} (leave it None "
                             "to use the checkpoint's)")
        return arrays, seed, n_blocks, threads

    def _fit(self, X, return_doc_topic: bool, resume=None) -> None:
        # validation before any cluster work (dask arrays: dtype here, values on workers)
        if not _is_dask_collection(X) or _is_dataframe(X):
            X = _local_counts(X)
            _check_shape(X.shape[0], X.shape[1], int(X.data.sum()))
        else:
            _check_dask_array(X)
        alpha = self._alpha()
        resumed = self._resume_settings(resume) if resume is not None else None
        transport = _transport()
        with cluster_client(self.client) as client:
            if resumed is not None:
                saved, seed, n_blocks, threads = resumed
            else:
                seed = self._seed()
                n_blocks = self.n_blocks if self.n_blocks is not None else worker_count(client)
                threads = (self.block_threads if self.block_threads is not None
                           else _fewest_threads(client))
            # every thread needs a document and a word of its own
            threads = max(1, min(threads, X.shape[0], X.shape[1]))
            n_blocks = max(1, min(n_blocks, X.shape[0] // threads, X.shape[1] // threads))
            pieces, word_counts, bounds, n_docs, n_words = _prepare_corpus(X, client,
                                                                         n_blocks * threads)
            P = len(pieces) // threads
            shards = _group(client, pieces, P, threads)
            docs = np.diff(bounds).reshape(P, threads).sum(axis=1)  # per block
            sampler = self._choose_sampler(client, docs, float(np.sum(word_counts)) / P,
                                           n_docs=n_docs)
            word_block, word_local, block_words = partition_vocabulary(word_counts,
                                                                       P * threads)
            program = LDAProgram(
                self.n_components, alpha, self.topic_word_prior, word_block,
                word_local, block_words, max_iter=self.max_iter, threads=threads,
                sync_every=min(self.sync_every, P), sampler=sampler,
                mh_steps=self.mh_steps, seed=seed, return_doc_topic=return_doc_topic,
                optimize_interval=self.optimize_interval,
                optimize_burn_in=self.optimize_burn_in)
            if resumed is not None:  # a clear error before the engine starts placing blocks
                program.check_checkpoint(saved)
            result = run(program, shards, client, max_rounds=program.n_rounds,
                         staleness=int(self.staleness), progress=bool(self.progress),
                         transport=transport, gather_carried=self.gather_model,
                         desc="dask_strads.LDA", checkpoint=self.checkpoint,
                         checkpoint_every=self.checkpoint_every, resume=resume)
            self._seed_value = seed
            self.sampler_ = sampler
            self._set_fitted(program, result, n_docs, n_words, client)

    def _alpha(self) -> np.ndarray:
        """The doc-topic prior to start from, (K,): ``doc_topic_prior`` (a number: the
        same for every topic), or ``1 / K`` for None."""
        K = self.n_components
        if self.doc_topic_prior is None:
            return np.full(K, 1.0 / K)
        return as_alpha(self.doc_topic_prior, K, name="doc_topic_prior")

    def _choose_sampler(self, client, shard_docs, shard_tokens: float,
                        n_docs: int | None = None) -> str:
        """The sampler of ``"auto"``: the cheapest per token by ``_sampler_costs``, if
        its dense doc-topic counts (the largest shard's documents x K int32) stay under a
        tenth of the smallest worker memory limit; else the sparse Gibbs sampler, whose
        doc lists are O(tokens)."""
        if self.sampler != "auto":
            return self.sampler
        shard_docs = np.asarray(shard_docs)
        if n_docs is None:
            n_docs = int(shard_docs.sum())
        mean_length = shard_tokens * len(shard_docs) / max(n_docs, 1)
        costs = _sampler_costs(self.n_components, mean_length)
        dense = int(np.max(shard_docs, initial=0)) * self.n_components * 4
        limits = [w.get("memory_limit") or 0
                  for w in workers_of(client).values()]
        limits = [m for m in limits if m > 0]
        budget = min(limits) / 10 if limits else 1e9
        if dense > budget:
            return "sparse"
        return min(costs, key=costs.get)

    def _set_fitted(self, program: LDAProgram, result, n_docs: int, n_words: int,
                    client) -> None:
        state = result.state
        self.n_features_in_ = n_words
        self._n_features_out = self.n_components  # transform's columns, named lda0, ...
        self.n_tokens_ = state["n_tokens"]
        self.loglikelihoods_ = np.asarray(state["loglikelihoods"], dtype=np.float64)
        self.history_ = result.history
        self.recoveries_ = list(result.recoveries)
        self.handovers_ = list(result.handovers)
        self.n_iter_ = int(state["iteration"])
        self.n_blocks_ = program.n_blocks
        self.block_threads_ = program.threads
        self.doc_topic_prior_ = np.array(program.alpha_at(state, state["pulled"] - 1))
        self._partition = (program.carried_block, program.carried_local,
                           program.carried_words)
        self._topic_totals = state["nk"].copy()
        if self.gather_model:
            table = np.zeros((n_words, self.n_components), dtype=np.int64)
            for b, block in result.carried.items():
                words = np.flatnonzero(program.carried_block == b)
                table[words[np.argsort(program.carried_local[words])]] = block
            self.components_ = table.T.astype(np.float64) + self.topic_word_prior
            self._word_topic_futures = None
        else:
            self._word_topic_futures = dict(result.carried)
            self._client = client
        if program.return_doc_topic:
            ndk = np.concatenate([result.block_results[p] for p in range(program.n_blocks)])
            theta = ndk + self.doc_topic_prior_
            self.doc_topic_ = theta / theta.sum(axis=1, keepdims=True)

    # -------------------------------------------------------------- model access
    def word_topic_dask(self):
        """The word-topic counts (n_features, n_components) as a dask array.

        After ``fit(gather_model=False)`` the array is built from the vocabulary blocks'
        futures, which stay on the cluster while this estimator (or the array) holds
        them and the fit's client is open; nothing is gathered until you compute it on
        that client (``client.compute(lda.word_topic_dask())``, or with the client as the
        default scheduler). After a gathering fit it wraps ``components_``.

        Returns
        -------
        dask.array.Array of int32 / int64
        """
        import dask.array as da

        check_is_fitted(self, "n_iter_")
        futures = getattr(self, "_word_topic_futures", None)
        if futures is None:
            counts = np.rint(self.components_ - self.topic_word_prior).astype(np.int64).T
            return da.from_array(counts, chunks=(max(1, math.ceil(len(counts) / 4)), -1))
        word_block, word_local, block_words = self._partition
        blocks = [da.from_delayed(futures[b], shape=(int(block_words[b]), self.n_components),
                                  dtype=np.int32) for b in range(len(block_words))]
        stacked = da.concatenate(blocks, axis=0)
        offset = np.concatenate(([0], np.cumsum(block_words)))
        position = offset[word_block] + word_local
        return stacked[position]

    def _phi(self) -> np.ndarray:
        """p(w | k) as a (V, K) C-contiguous array."""
        if not hasattr(self, "components_"):
            raise AttributeError("This LDA was fitted with gather_model=False; transform and "
                                 "score need components_ (gather word_topic_dask() or refit)")
        topic_word = self.components_ / self.components_.sum(axis=1, keepdims=True)
        return np.ascontiguousarray(topic_word.T)

    def _transform_input(self, X) -> sp.csr_matrix:
        check_is_fitted(self, "n_iter_")
        if _is_dataframe(X):
            Xc = _frame_counts(X, n_words=self.n_features_in_)
        else:
            if _is_dask_collection(X):
                _check_counts_dtype(X.dtype, "X")
                X = X.compute()
            Xc = _csr_counts(X)
        if Xc.shape[1] != self.n_features_in_:
            raise ValueError(f"X: has {Xc.shape[1]} features, but LDA was fitted with "
                             f"{self.n_features_in_}")
        return Xc

    def transform(self, X):
        """Topic distributions of documents by fold-in Gibbs sampling (topics fixed).

        Each document is sampled ``transform_iter`` sweeps with the fitted topic-word
        distributions and ``doc_topic_prior_`` held fixed; the returned rows average
        ``(n_dk + alpha_k) / (n_d + sum alpha)`` over the second half of the sweeps (rows
        sum to one).

        Parameters
        ----------
        X : document-term counts, as for :meth:`fit`

        Returns
        -------
        ndarray of shape (n_samples, n_components)
        """
        Xc = self._transform_input(X)
        return self._fold_in(Xc)

    def _fold_in(self, Xc: sp.csr_matrix) -> np.ndarray:
        n_iter = int(self.transform_iter)
        return kernels.fold_in(Xc.indptr.astype(np.int64), Xc.indices.astype(np.int32),
                               Xc.data.astype(np.int64), self._phi(),
                               np.ascontiguousarray(self.doc_topic_prior_, dtype=np.float64),
                               n_iter, n_iter // 2, self._seed_value + 1)

    def score(self, X, y=None) -> float:
        """Log-likelihood of the documents, ``sum_d sum_w x_dw log sum_k theta_dk phi_kw``,
        with ``theta`` from :meth:`transform` (higher is better)."""
        Xc = self._transform_input(X)
        theta = self._fold_in(Xc)
        return float(kernels.doc_word_loglik(Xc.indptr.astype(np.int64),
                                             Xc.indices.astype(np.int32),
                                             Xc.data.astype(np.int64), theta, self._phi()))

    def perplexity(self, X) -> float:
        """``exp(-score(X) / n_tokens)``: lower is better."""
        Xc = self._transform_input(X)
        n_tokens = max(int(Xc.data.sum()), 1)
        return float(np.exp(-self.score(Xc) / n_tokens))

    def top_words(self, vocabulary=None, n_words: int = 10) -> list[list]:
        """The ``n_words`` most probable words of every topic, most probable first.

        Parameters
        ----------
        vocabulary : sequence of length n_features, optional
            The word of every column of ``X`` (e.g. a ``CountVectorizer``'s
            ``get_feature_names_out()``); without it the column indices are returned.
        n_words : int, default=10

        Returns
        -------
        list of n_components lists of words (or column indices)
        """
        check_is_fitted(self, "n_iter_")
        if not hasattr(self, "components_"):
            raise AttributeError("This LDA was fitted with gather_model=False; top_words needs "
                                 "components_ (gather word_topic_dask() or refit)")
        if not isinstance(n_words, numbers.Integral) or isinstance(n_words, bool) or n_words < 1:
            raise ValueError(f"n_words: expected an integer >= 1, got {n_words!r}")
        n_words = min(int(n_words), self.n_features_in_)
        if vocabulary is not None:
            vocabulary = np.asarray(vocabulary)
            if vocabulary.ndim != 1 or len(vocabulary) != self.n_features_in_:
                raise ValueError(f"vocabulary: expected {self.n_features_in_} words (one per "
                                 f"feature), got shape {vocabulary.shape}")
        # stable order among equal counts: lower column first
        order = np.argsort(-self.components_, axis=1, kind="stable")[:, :n_words]
        if vocabulary is None:
            return [row.tolist() for row in order]
        return [vocabulary[row].tolist() for row in order]

    def loglikelihood(self) -> float:
        """Complete-data log-likelihood of the last iteration (the ``lda`` package's)."""
        check_is_fitted(self, "loglikelihoods_")
        return float(self.loglikelihoods_[-1])


LatentDirichletAllocation = LDA
