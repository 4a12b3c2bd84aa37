"""Real text corpora for the LDA benchmarks, built offline from what the machine ships.

Two corpora, both made of English technical prose with Zipfian word frequencies:

``docs-1m``   docstrings of the Python standard library and of every package installed in
              the running interpreter's site-packages (one docstring = one document):
              many short documents, about 1 M training tokens after preparation.
``text-10m``  the same docstrings plus the prose files the packages ship (``.rst``,
              ``.md``, ``.txt``: documentation, READMEs, licences), ``/usr/share/doc``
              (change logs, copyright files, gzipped or not) and the manual pages of
              ``/usr/share/man`` (troff markup stripped), cut into paragraphs of up to
              about 150 words: about 10 M training tokens.

Preparation (scikit-learn's ``CountVectorizer``): lower case, tokens of 3+ letters
(``[a-z]{3,}``: identifiers split at ``_`` and digits), scikit-learn's English stop words,
``min_df`` = 5 documents, ``max_df`` = 50% of documents; documents left with fewer than 10
tokens are dropped. 10% of the documents (random, seeded) are held out for the quality
measures. A document is kept once (duplicate texts, e.g. re-exported docstrings or copies
of a licence, are dropped).

The text found depends on what is installed, so the corpus is cached with its statistics:
``~/.cache/dask_strads/corpora/<name>.npz`` (CSR train / test counts and the vocabulary).
Rebuild with ``python bench/corpora.py --rebuild``.

Usage::

    python bench/corpora.py             # build (or load) both, print their statistics
    python bench/corpora.py docs-1m     # one of them
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import os
import re
import sys
import sysconfig
from pathlib import Path

import numpy as np
import scipy.sparse as sp

CACHE = Path(os.environ.get("DASK_STRADS_CORPORA", Path.home() / ".cache/dask_strads/corpora"))
NAMES = ("docs-1m", "text-10m")
TOKEN_TARGET = {"docs-1m": 1_000_000, "text-10m": 10_000_000}
MIN_DF, MAX_DF, MIN_TOKENS, TEST_FRACTION, SEED = 5, 0.5, 10, 0.1, 0
PARAGRAPH_WORDS = 150


# ----------------------------------------------------------------------------- sources
def _python_roots() -> list[Path]:
    roots = {Path(sysconfig.get_paths()["stdlib"])}
    roots.update(Path(p) for p in sys.path if p.endswith("site-packages"))
    return sorted(r for r in roots if r.is_dir())


def _docstrings(path: Path):
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def docstring_texts():
    """Every docstring of the stdlib and site-packages (sorted walk: reproducible)."""
    for root in _python_roots():
        for path in sorted(root.rglob("*.py")):
            if "test" in path.parts or "tests" in path.parts:
                continue  # test docstrings are one-liners repeated thousands of times
            yield from _docstrings(path)


_TROFF = re.compile(r"^\.\S*|\\f[A-Z]|\\\(..|\\[-&e|^ ]|\\s[-+]?\d")


def _read_text(path: Path) -> str:
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError):
        return ""
    if b"\0" in raw[:4096]:
        return ""  # binary
    text = raw.decode("utf-8", "replace")
    if "/man/" in str(path):
        text = "\n".join(_TROFF.sub(" ", line) for line in text.splitlines())
    return text


def _paragraphs(text: str):
    """Blank-line separated paragraphs, merged or cut to about PARAGRAPH_WORDS words."""
    words: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        words.extend(para.split())
        while len(words) >= PARAGRAPH_WORDS:
            yield " ".join(words[:PARAGRAPH_WORDS])
            words = words[PARAGRAPH_WORDS:]
    if words:
        yield " ".join(words)


def prose_texts():
    """Documentation files of the packages, /usr/share/doc and the man pages, as paragraphs."""
    files = []
    for root in _python_roots():
        files += [p for p in root.rglob("*") if p.suffix in (".rst", ".md", ".txt")
                  and p.is_file()]
    for root in (Path("/usr/share/doc"), Path("/usr/share/man")):
        if root.is_dir():
            files += [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                      and p.suffix not in (".html", ".png", ".svg", ".css", ".js")]
    for path in sorted(files):
        yield from _paragraphs(_read_text(path))


# ----------------------------------------------------------------------------- preparation
def _unique(texts):
    seen = set()
    for t in texts:
        h = hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=12).digest()
        if h not in seen:
            seen.add(h)
            yield t


def prepare(texts: list[str]):
    """Counts (CSR, documents x words) and the vocabulary, after the preparation above."""
    from sklearn.feature_extraction.text import CountVectorizer

    vec = CountVectorizer(lowercase=True, token_pattern=r"[a-z]{3,}", stop_words="english",
                          min_df=MIN_DF, max_df=MAX_DF, dtype=np.int32)
    X = vec.fit_transform(texts).tocsr()
    keep = np.flatnonzero(np.asarray(X.sum(axis=1)).ravel() >= MIN_TOKENS)
    return X[keep], np.asarray(vec.get_feature_names_out())


def _split(X):
    rng = np.random.default_rng(SEED)
    test = rng.random(X.shape[0]) < TEST_FRACTION
    return X[~test], X[test]


def build(name: str):
    texts = list(_unique(docstring_texts()))
    if name == "text-10m":
        texts += list(_unique(prose_texts()))
    X, vocab = prepare(texts)
    # trim to the target size (documents in a seeded random order) and re-prune the
    # vocabulary of the trimmed corpus
    target = TOKEN_TARGET[name] / (1 - TEST_FRACTION)
    order = np.random.default_rng(SEED).permutation(X.shape[0])
    lengths = np.asarray(X.sum(axis=1)).ravel()[order]
    n = int(np.searchsorted(np.cumsum(lengths), target)) + 1
    X = X[np.sort(order[:n])]
    df = np.asarray((X > 0).sum(axis=0)).ravel()
    cols = np.flatnonzero((df >= MIN_DF) & (df <= MAX_DF * X.shape[0]))
    X, vocab = X[:, cols], vocab[cols]
    X = X[np.asarray(X.sum(axis=1)).ravel() >= MIN_TOKENS]
    train, test = _split(X.tocsr())
    return train, test, vocab


def load(name: str, rebuild: bool = False):
    """``(train, test, vocab)``: CSR int32 counts and the words, built once and cached."""
    if name not in NAMES:
        raise ValueError(f"corpus: expected one of {NAMES}, got {name!r}")
    path = CACHE / f"{name}.npz"
    if path.exists() and not rebuild:
        z = np.load(path, allow_pickle=False)
        mats = [sp.csr_matrix((z[f"{s}_data"], z[f"{s}_indices"], z[f"{s}_indptr"]),
                              shape=tuple(z[f"{s}_shape"])) for s in ("train", "test")]
        return mats[0], mats[1], z["vocab"]
    train, test, vocab = build(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"vocab": vocab.astype(str)}
    for s, m in (("train", train), ("test", test)):
        arrays.update({f"{s}_data": m.data, f"{s}_indices": m.indices, f"{s}_indptr": m.indptr,
                       f"{s}_shape": np.asarray(m.shape)})
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
    return train, test, vocab


def describe(name: str, train, test, vocab) -> str:
    lengths = np.asarray(train.sum(axis=1)).ravel()
    freq = np.sort(np.asarray(train.sum(axis=0)).ravel())[::-1]
    half = int(np.searchsorted(np.cumsum(freq), freq.sum() / 2)) + 1
    return (f"{name}: {train.shape[0]} training documents, {int(train.sum())} tokens, "
            f"V = {train.shape[1]}, tokens per document mean {lengths.mean():.0f} / median "
            f"{np.median(lengths):.0f}; {half} words carry half the tokens; held out "
            f"{test.shape[0]} documents, {int(test.sum())} tokens")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(NAMES))
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args(argv)
    for name in args.names:
        print(describe(name, *load(name, rebuild=args.rebuild)), flush=True)


if __name__ == "__main__":
    main()
