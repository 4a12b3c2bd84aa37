"""The command line: durations and lifetimes, data loaders, SLURM job scripts, result files,
and fits end to end (joined cluster in-process, and ``python -m dask_strads`` in a subprocess).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

from dask_strads import cli

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- durations
@pytest.mark.parametrize("text, seconds", [
    ("01:00:00", 3600), ("00:30:00", 1800), ("1-00:00:00", 86400), ("2-12:00", 216000),
    ("90", 5400), ("05:30", 330), ("90s", 90), ("55m", 3300), ("2h", 7200), ("1d", 86400),
    (42, 42),
])
def test_parse_duration(text, seconds):
    assert cli.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "-5", "10x", "1:-1"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="duration"):
        cli.parse_duration(text)


@pytest.mark.parametrize("walltime", ["00:02:00", "00:30:00", "01:00:00", "12:00:00",
                                      "3-00:00:00"])
def test_lifetime_leaves_the_job_before_its_walltime(walltime):
    lifetime, stagger = cli.lifetime_for(walltime)
    wall = cli.parse_duration(walltime)
    life, stag = cli.parse_duration(lifetime), cli.parse_duration(stagger)
    latest = life + stag
    assert latest < wall and wall - latest >= 10  # retire at least 10 s before the kill
    assert 0 < stag < wall - life  # staggered, still inside the margin
    assert life - stag > 0


def test_lifetime_explicit_margin_and_too_short_walltime():
    assert cli.lifetime_for("00:01:00", margin="35s", stagger="2s") == ("25s", "2s")
    with pytest.raises(ValueError, match="walltime"):
        cli.lifetime_for("00:00:30", margin="30s")
    with pytest.raises(ValueError, match="lifetime_stagger"):
        cli.lifetime_for("01:00:00", margin="60s", stagger="90s")


# ----------------------------------------------------------------------------- data files
@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 8))
    coef = np.array([2.0, -1.5, 0, 0, 1.0, 0, 0, 0.5])
    y = X @ coef + 0.05 * rng.standard_normal(120)
    return X, y


def test_load_npz_with_X_and_y(tmp_path, regression):
    X, y = regression
    np.savez(tmp_path / "d.npz", X=X, y=y)
    data = cli.load_data(tmp_path / "d.npz", need_target=True)
    np.testing.assert_array_equal(data.X, X)
    np.testing.assert_array_equal(data.y, y)
    np.savez(tmp_path / "e.npz", features=X, response=y)
    data = cli.load_data(tmp_path / "e.npz", target="response", need_target=True)
    np.testing.assert_array_equal(data.X, X)
    np.testing.assert_array_equal(data.y, y)


def test_load_scipy_sparse_npz_and_target_column(tmp_path, regression):
    X, y = regression
    A = sp.csr_array(np.column_stack([X, y]) * (np.abs(X).mean() > 0))
    sp.save_npz(tmp_path / "s.npz", sp.csr_matrix(A))
    data = cli.load_data(tmp_path / "s.npz", target="-1", need_target=True)
    assert sp.issparse(data.X) and data.X.shape == X.shape
    np.testing.assert_allclose(data.X.toarray(), X)
    np.testing.assert_allclose(data.y, y)
    plain = cli.load_data(tmp_path / "s.npz")
    assert plain.y is None and plain.X.shape == (120, 9)


def test_load_npy_and_matrix_market(tmp_path, regression):
    X, y = regression
    np.save(tmp_path / "m.npy", np.column_stack([y, X]))
    data = cli.load_data(tmp_path / "m.npy", target="0", need_target=True)
    np.testing.assert_array_equal(data.X, X)
    np.testing.assert_array_equal(data.y, y)
    counts = sp.random(30, 20, density=0.2, random_state=1, format="coo")
    counts.data = np.ceil(counts.data * 4)
    scipy.io.mmwrite(tmp_path / "c.mtx", counts)
    data = cli.load_data(tmp_path / "c.mtx")
    assert sp.issparse(data.X) and data.y is None
    np.testing.assert_array_equal(data.X.toarray(), counts.toarray())


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_load_tables_through_dask_dataframe(tmp_path, regression, fmt):
    X, y = regression
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(price=y)
    path = tmp_path / f"t.{fmt}"
    frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path)
    data = cli.load_data(path, target="price", need_target=True)
    assert hasattr(data.X, "dask") and data.X.shape == X.shape  # lazy, known chunk sizes
    np.testing.assert_allclose(data.X.compute(), X)
    np.testing.assert_allclose(data.y.compute(), y)


def test_load_a_parquet_dataset_whose_target_column_reads_in_fewer_partitions(tmp_path,
                                                                               regression):
    """dask reads one column of a dataset of small files in fewer partitions than the
    table (dask/dask#12411): the target's and the features' row chunks differ."""
    import dask.dataframe as dd

    X, y = regression
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(price=y)
    dd.from_pandas(frame, npartitions=4).to_parquet(tmp_path / "t.parquet")
    data = cli.load_data(tmp_path / "t.parquet", target="price", need_target=True)
    np.testing.assert_array_equal(data.X.compute(), X)
    np.testing.assert_array_equal(data.y.compute(), y)


def test_several_table_files_are_read_as_one_table(tmp_path, regression):
    """What a shell makes of ``--data 'part*.csv'`` unquoted: the files, in order."""
    X, y = regression
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(price=y)
    parts = [tmp_path / f"part{i}.csv" for i in range(3)]
    for part, rows in zip(parts, np.array_split(np.arange(len(y)), 3)):
        frame.iloc[rows].to_csv(part, index=False)
    data = cli.load_data(parts, target="price", need_target=True)
    np.testing.assert_allclose(data.X.compute(), X)
    np.testing.assert_allclose(data.y.compute(), y)
    assert data.source == f"{parts[0]} and 2 more"
    args = ["fit", "lasso", "--data", *map(str, parts), "--target", "price"]
    assert cli.build_parser().parse_known_args(args)[1] == list(map(str, parts[1:]))
    np.save(tmp_path / "m.npy", X)
    with pytest.raises(ValueError, match="data: 2 paths given; several are read as one"):
        cli.load_data([parts[0], tmp_path / "m.npy"])
    with pytest.raises(FileNotFoundError, match="data: .*gone.csv does not exist"):
        cli.load_data([parts[0], tmp_path / "gone.csv"])


def test_tables_by_folder_and_glob_and_missing_ones(tmp_path, regression):
    X, y = regression
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(price=y)
    (tmp_path / "parts").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(y)), 2)):
        frame.iloc[rows].to_csv(tmp_path / "parts" / f"p{i}.csv", index=False)
    for path in (tmp_path / "parts", f"{tmp_path}/parts/*"):  # CSV, not parquet
        data = cli.load_data(path, target="price")
        np.testing.assert_allclose(data.X.compute(), X)
    with pytest.raises(FileNotFoundError, match="data: no file matches .*nothere"):
        cli.load_data(f"{tmp_path}/nothere/*.parquet", target="price")
    with pytest.raises(FileNotFoundError, match="data: .*missing.csv does not exist"):
        cli.load_data(tmp_path / "missing.csv", target="price")


def test_an_expanded_glob_before_or_after_the_model_name(tmp_path, regression, monkeypatch):
    X, y = regression
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(price=y)
    parts = [str(tmp_path / f"part{i}.csv") for i in range(3)]
    for part, rows in zip(parts, np.array_split(np.arange(len(y)), 3)):
        frame.iloc[rows].to_csv(part, index=False)
    fits = []
    monkeypatch.setattr(cli, "run_fit", lambda args, prepared: fits.append((args, prepared)))
    cli.main(["fit", "--data", *parts, "lasso", "--target", "price"])
    cli.main(["fit", "lasso", "--data", *parts, "--target", "price"])
    for args, (model, data, _) in fits:
        assert model == "lasso" and args.data == parts
        np.testing.assert_allclose(data.X.compute(), X)


def test_a_word_that_is_no_file_after_the_data_is_still_an_error(files, no_cluster, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "lasso", "--data", str(files / "ok.npz"), "oops"])
    assert exc.value.code == 2
    assert "unrecognized arguments: oops" in capsys.readouterr().err


def test_load_table_of_triplets(tmp_path):
    triplets = pd.DataFrame({"user": [0, 0, 2, 3], "item": [1, 4, 0, 4],
                             "rating": [5.0, 3.0, 1.0, 2.0]})
    triplets.to_parquet(tmp_path / "r.parquet")
    data = cli.load_data(tmp_path / "r.parquet", coo="user,item,rating")
    assert sp.issparse(data.X) and data.X.shape == (4, 5) and data.X.nnz == 4
    assert data.X.tocsr()[2, 0] == 1.0 and data.X.tocsr()[0, 4] == 3.0
    with pytest.raises(ValueError, match="coo"):
        cli.load_data(tmp_path / "r.parquet", coo="user,item")
    triplets.assign(user=[0, 0.5, 2, 3]).to_parquet(tmp_path / "half.parquet")
    with pytest.raises(ValueError, match="coo: column 'user' of .* holds 0.5; expected "
                                         "whole-number indices"):
        cli.load_data(tmp_path / "half.parquet", coo="user,item,rating")
    triplets.assign(item=list("abca")).to_parquet(tmp_path / "names.parquet")
    with pytest.raises(TypeError, match="coo: column 'item' of .* holds"):
        cli.load_data(tmp_path / "names.parquet", coo="user,item,rating")


def test_models_without_a_response_refuse_a_target_and_mf_a_table_without_coo(
        tmp_path, files, no_cluster, capsys):
    err = _fails_in_one_line(capsys, ["fit", "lda", "--data",
                                      str(files / "negative_counts.npy"), "--target", "-1"])
    assert "target: lda takes no response; drop --target" in err
    pd.DataFrame({"user": [0, 1], "item": [1, 0], "rating": [4.0, 2.0]}).to_csv(
        tmp_path / "r.csv", index=False)
    err = _fails_in_one_line(capsys, ["fit", "mf", "--data", str(tmp_path / "r.csv")])
    assert "coo: matrix factorization reads a table as triplets" in err


def test_a_libraries_long_message_is_one_line(monkeypatch, capsys, files):
    def long(args):
        raise ValueError("Mismatched dtypes.\n+----+\n| b  |\n+----+\n\n- b\n  could not "
                         "convert 'oops'")

    monkeypatch.setattr(cli, "prepare_fit", long)
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz")])
    assert err.endswith("error: Mismatched dtypes. - b could not convert 'oops'\n")


def test_json_summary_is_strict_json():
    from dask_strads.cli import _strict_json

    info = {"objective": float("inf"), "params": {"tol": float("nan"), "alpha": 0.1},
            "shape": [3, 4]}
    text = json.dumps(_strict_json(info), allow_nan=False)
    assert json.loads(text) == {"objective": "inf", "params": {"tol": "nan", "alpha": 0.1},
                                "shape": [3, 4]}


def test_repeated_triplets_are_counts_to_lda_and_an_error_to_mf(tmp_path, no_cluster,
                                                                 capsys):
    """A table may repeat a (row, column) pair: LDA adds the counts, a rating matrix
    must not (it would fit the sum of two ratings)."""
    from dask_strads.cli.models import check_before_cluster, make_estimator

    triplets = pd.DataFrame({"doc": [0, 0, 1, 0], "word": [1, 2, 2, 1],
                             "n": [2, 1, 4, 3]})
    triplets.to_csv(tmp_path / "t.csv", index=False)
    data = cli.load_data(tmp_path / "t.csv", coo="doc,word,n")
    check_before_cluster("lda", make_estimator("lda", {"n_components": 2}), data)
    from dask_strads.lda.inputs import _csr_counts

    assert _csr_counts(data.X).toarray().tolist() == [[0, 5, 1], [0, 0, 4]]
    err = _fails_in_one_line(capsys, ["fit", "mf", "--data", str(tmp_path / "t.csv"),
                                      "--coo", "doc,word,n"])
    assert "X: 1 duplicate entry, e.g. (0, 1)" in err


def test_load_errors_name_the_argument(tmp_path, regression):
    X, y = regression
    with pytest.raises(FileNotFoundError, match="data"):
        cli.load_data(tmp_path / "missing.npz")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="data: .*unknown format"):
        cli.load_data(tmp_path / "x.json")
    np.savez(tmp_path / "noy.npz", X=X)
    with pytest.raises(ValueError, match="target"):
        cli.load_data(tmp_path / "noy.npz", need_target=True)
    with pytest.raises(ValueError, match="target: 'w'"):
        cli.load_data(tmp_path / "noy.npz", target="w")
    np.savez(tmp_path / "short.npz", X=X, y=y[:-1])
    with pytest.raises(ValueError, match="target: 119 values for 120 rows"):
        cli.load_data(tmp_path / "short.npz", need_target=True)
    np.save(tmp_path / "m.npy", X)
    with pytest.raises(ValueError, match="target: column 8 is out of range"):
        cli.load_data(tmp_path / "m.npy", target="8")
    with pytest.raises(ValueError, match="target: 'price' must be a column number"):
        cli.load_data(tmp_path / "m.npy", target="price")
    np.savez(tmp_path / "many.npz", a=X, b=X, c=y)
    with pytest.raises(ValueError, match="named 'X'"):
        cli.load_data(tmp_path / "many.npz")


# ----------------------------------------------------------------------------- SLURM options
def test_slurm_job_script_has_lifetime_and_site_options(tmp_path):
    from dask_jobqueue import SLURMCluster

    args = cli.build_parser().parse_args([
        "fit", "lasso", "--data", "x.npz", "--cluster", "slurm", "--jobs", "3", "--cores", "4",
        "--processes", "2", "--memory", "16GB", "--walltime", "02:00:00", "--queue", "short",
        "--account", "proj1", "--interface", "lo", "--job-extra=--exclusive",
        "--log-directory", str(tmp_path)])
    kwargs = cli.slurm_kwargs(args)
    assert kwargs["worker_extra_args"] == ["--lifetime", "6600s", "--lifetime-stagger", "200s"]
    with SLURMCluster(**kwargs) as cluster:  # no job is submitted before scale/adapt
        script = cluster.job_script()
    for line in ("#SBATCH -p short", "#SBATCH -A proj1", "#SBATCH -t 02:00:00",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --mem=15G", "#SBATCH --exclusive",
                 "--lifetime 6600s", "--lifetime-stagger 200s", "--interface lo",
                 "--nworkers 2"):
        assert line in script, (line, script)

    none = cli.build_parser().parse_args(["fit", "lasso", "--data", "x", "--cluster", "slurm",
                                          "--lifetime", "none"])
    assert "--lifetime" not in cli.slurm_kwargs(none)["worker_extra_args"]
    fixed = cli.build_parser().parse_args(["fit", "lasso", "--data", "x", "--cluster", "slurm",
                                           "--lifetime", "50m", "--lifetime-stagger", "2m"])
    assert cli.slurm_kwargs(fixed)["worker_extra_args"] == [
        "--lifetime", "3000s", "--lifetime-stagger", "120s"]


# ----------------------------------------------------------------------------- estimators
def test_model_params_and_unknown_names():
    args = cli.build_parser().parse_args([
        "fit", "elasticnet", "--data", "x", "--alpha", "0.5", "--l1-ratio", "0.3",
        "--set", "schedule=\"round_robin\"", "--set", "n-candidates=20",
        "--set", "fit-intercept=false"])
    params = cli.model_params(args)
    assert params == {"alpha": 0.5, "l1_ratio": 0.3, "schedule": "round_robin",
                      "n_candidates": 20, "fit_intercept": False}
    est = cli.make_estimator("ElasticNet", params)
    assert type(est).__name__ == "ElasticNet" and est.get_params()["n_candidates"] == 20
    with pytest.raises(ValueError, match="n_components: Lasso has no parameter"):
        cli.make_estimator("lasso", {"n_components": 3})
    with pytest.raises(ValueError, match="model: 'svm' is not a model"):
        cli.make_estimator("svm", {})
    with pytest.raises(ValueError, match="set: 'rho' must look like NAME=VALUE"):
        cli.model_params(cli.build_parser().parse_args(["fit", "lasso", "--data", "x",
                                                        "--set", "rho"]))


def test_save_results_without_pickle(tmp_path):
    class Fitted:
        def __init__(self):
            self.coef_ = np.arange(3.0)
            self.n_iter_ = 7
            self.stop_reason_ = "converged"
            self.seen_ = sp.csr_matrix(np.eye(3))
            self.history_ = pd.DataFrame({"round": [0, 1], "objective": [2.0, 1.0],
                                          "transport": ["direct", "direct"]})
            self.unfitted = "not saved"
            self._private_ = "not saved"
            self.opaque_ = object()  # cannot be stored without pickle: left out

    path = cli.save_results(tmp_path / "out", Fitted(), {"model": "x"})
    assert path.endswith(".npz")
    with np.load(path, allow_pickle=False) as f:
        assert sorted(f.keys()) == sorted([
            "coef_", "n_iter_", "stop_reason_", "seen_.row", "seen_.col", "seen_.data",
            "seen_.shape", "history_.round", "history_.objective", "history_.transport",
            "meta"])
        np.testing.assert_array_equal(f["coef_"], [0, 1, 2])
        assert int(f["n_iter_"]) == 7 and str(f["stop_reason_"]) == "converged"
        seen = sp.coo_array((f["seen_.data"], (f["seen_.row"], f["seen_.col"])),
                            shape=tuple(f["seen_.shape"]))
        np.testing.assert_array_equal(seen.toarray(), np.eye(3))
        assert list(f["history_.transport"]) == ["direct", "direct"]
        assert json.loads(str(f["meta"])) == {"model": "x"}


def test_demo_dispatches_to_dask_strads_demo_main(monkeypatch):
    import dask_strads.demo

    seen = []
    monkeypatch.setattr(dask_strads.demo, "main", lambda argv: seen.append(argv) or 3)
    assert cli.main(["demo", "--n-workers", "1", "--help"]) == 3
    assert seen == [["--n-workers", "1", "--help"]]


def test_bad_command_lines_exit_with_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "lasso"])  # --data is required
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "svm", "--data", str(tmp_path / "x.npz")])
    assert exc.value.code == 2 and "model: 'svm' is not a model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "lasso", "--data", str(tmp_path / "missing.npz")])
    assert exc.value.code == 2 and "does not exist" in capsys.readouterr().err


# ----------------------------------------------------------------------------- end to end
def test_fit_lasso_on_a_joined_cluster_matches_sklearn(tmp_path, regression, cluster, capsys):
    from sklearn.linear_model import Lasso

    X, y = regression
    np.savez(tmp_path / "train.npz", X=X, y=y)
    out = tmp_path / "lasso.npz"
    code = cli.main(["fit", "lasso", "--data", str(tmp_path / "train.npz"), "--alpha", "0.05",
                     "--tol", "1e-10", "--max-iter", "5000", "--scheduler",
                     cluster.scheduler_address, "--output", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["model"] == "lasso" and summary["shape"] == [120, 8]
    assert summary["n_workers"] == 2 and summary["output"] == str(out)
    reference = Lasso(alpha=0.05, tol=1e-10, max_iter=5000).fit(X, y)
    with np.load(out, allow_pickle=False) as f:
        np.testing.assert_allclose(f["coef_"], reference.coef_, atol=1e-6)
        np.testing.assert_allclose(f["intercept_"], reference.intercept_, atol=1e-6)
        assert summary["nonzero_coef"] == int(np.count_nonzero(f["coef_"]))
    assert len(cluster.scheduler_info["workers"]) == 2  # the joined cluster is left running


def test_fit_logistic_on_a_joined_cluster_matches_sklearn(tmp_path, cluster, capsys):
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(150, 6, n_informative=3, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    out = tmp_path / "logistic.npz"
    assert cli.main(["fit", "logistic", "--data", str(tmp_path / "train.npz"), "--set",
                     "C=0.5", "--tol", "1e-10", "--scheduler", cluster.scheduler_address,
                     "--output", str(out)]) == 0
    reference = LogisticRegression(C=0.5, l1_ratio=1.0, solver="saga", tol=1e-12,
                                   max_iter=100_000).fit(X, y)
    with np.load(out, allow_pickle=False) as f:
        np.testing.assert_allclose(f["coef_"], reference.coef_, atol=1e-4)
        np.testing.assert_array_equal(f["classes_"], [0, 1])


def test_fit_lda_through_a_scheduler_file(tmp_path, cluster, capsys):
    rng = np.random.default_rng(3)
    counts = sp.coo_array(sp.random(40, 30, density=0.3, random_state=rng))
    counts.data = np.ceil(counts.data * 3)
    scipy.io.mmwrite(tmp_path / "docs.mtx", counts)
    (tmp_path / "scheduler.json").write_text(json.dumps({"address": cluster.scheduler_address}))
    out = tmp_path / "lda.npz"
    assert cli.main(["fit", "lda", "--data", str(tmp_path / "docs.mtx"), "--n-components", "3",
                     "--max-iter", "5", "--random-state", "0", "--scheduler-file",
                     str(tmp_path / "scheduler.json"), "--output", str(out)]) == 0
    assert re.search(r"^estimator +LDA$", capsys.readouterr().out, re.M)
    with np.load(out, allow_pickle=False) as f:
        components = f["components_"]
        meta = json.loads(str(f["meta"]))
    assert components.shape == (3, 30)
    prior = meta["params"]["topic_word_prior"]
    # every token is assigned to exactly one topic: pseudo-counts minus the prior add up
    np.testing.assert_allclose((components - prior).sum(), counts.sum(), rtol=1e-9)
    np.testing.assert_allclose((components - prior).sum(axis=0), counts.sum(axis=0), rtol=1e-9)


@pytest.mark.slow
def test_python_dash_m_fit_mf_on_a_local_cluster(tmp_path):
    triplets = pd.DataFrame({"user": np.repeat(np.arange(20), 5),
                             "item": np.tile(np.arange(5), 20) * 3,
                             "rating": np.random.default_rng(0).integers(1, 6, 100) * 1.0})
    triplets.to_csv(tmp_path / "ratings.csv", index=False)
    out = tmp_path / "mf.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH",
                                                                                 "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "dask_strads", "fit", "mf", "--data",
         str(tmp_path / "ratings.csv"), "--coo", "user,item,rating", "--n-components", "2",
         "--alpha", "0.1", "--max-iter", "3", "--n-workers", "2", "--output", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^estimator +MatrixFactorization$", proc.stdout, re.M), proc.stdout
    with np.load(out, allow_pickle=False) as f:
        W, H = f["W_"], f["H_"]
    assert W.shape == (20, 2) and H.shape == (13, 2)
    assert np.isfinite(W).all() and np.isfinite(H).all()


# ----------------------------------------------------------------------------- fail fast
@pytest.fixture
def no_cluster(monkeypatch):
    """Starting a cluster fails the test: these errors must all come before one exists."""
    import dask_jobqueue
    import distributed

    def refuse(*args, **kwargs):
        raise AssertionError("a cluster was started before the input was checked")

    monkeypatch.setattr(cli, "make_cluster", refuse)
    monkeypatch.setattr(distributed, "LocalCluster", refuse)
    monkeypatch.setattr(distributed, "Client", refuse)
    monkeypatch.setattr(dask_jobqueue, "SLURMCluster", refuse)


def _fails_in_one_line(capsys, argv, code=2):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == code, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("python -m dask_strads fit: error: "), err
    return err


@pytest.fixture
def files(tmp_path, regression):
    X, y = regression
    np.savez(tmp_path / "ok.npz", X=X, y=y)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    np.savez(tmp_path / "nan_x.npz", X=Xn, y=y)
    yn = y.copy()
    yn[5] = np.inf
    np.savez(tmp_path / "inf_y.npz", X=X, y=yn)
    bad = sp.csr_matrix(X)
    bad.data[0] = np.nan
    sp.save_npz(tmp_path / "nan_sparse.npz", bad)
    (tmp_path / "garbage.npz").write_bytes(b"this is not a numpy file\n" * 20)
    whole = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "truncated.npz").write_bytes(whole[: len(whole) // 2])
    np.savez(tmp_path / "objects.npz", X=np.array([{"a": 1}, None], dtype=object), y=y[:2])
    (tmp_path / "garbage.npy").write_bytes(b"\x00" * 100)
    counts = np.ones((20, 10))
    counts[4, 4] = -1
    np.save(tmp_path / "negative_counts.npy", counts)
    frame = pd.DataFrame(X[:, :3], columns=["a", "b", "c"]).assign(y=y)
    frame.assign(name="x").to_parquet(tmp_path / "text_column.parquet")
    frame.assign(y="high").to_csv(tmp_path / "text_target.csv", index=False)
    frame.iloc[:0].to_csv(tmp_path / "header_only.csv", index=False)
    (tmp_path / "empty.mtx").write_text("")
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["--alpha", "abc"], "argument --alpha: invalid float value: 'abc'"),
    (["--alpha", "-1"], "alpha: must be a float in the range [0.0, inf)"),
    (["--max-iter", "0"], "max_iter: must be an int in the range [1, inf)"),
    (["--n-workers", "0"], "argument --n-workers: expected an integer >= 1, got '0'"),
    (["--jobs", "-2", "--cluster", "slurm"], "argument --jobs: expected an integer >= 1"),
    (["--wait-timeout", "0"], "argument --wait-timeout: expected a number of seconds > 0"),
    (["--set", "schedule=\"fastest\""], "schedule: must be a str among"),
    (["--cluster", "slurm", "--walltime", "00:00:10"], "walltime: '00:00:10' is too short"),
    (["--set", "gather_model=false"], "gather_model: set by the command line"),
    (["--output", "/nonexistent/folder/out.npz"], "output: cannot write into"),
])
def test_bad_options_fail_in_one_line_before_any_cluster(files, no_cluster, capsys, argv,
                                                         message):
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz"), *argv])
    assert message in err


@pytest.mark.parametrize("model, name, message", [
    ("lasso", "nan_x.npz", "X: contains NaN or infinity"),
    ("lasso", "inf_y.npz", "y: contains NaN or infinity"),
    ("lda", "nan_sparse.npz", "X: contains NaN or infinity"),
    ("lasso", "garbage.npz", "is not a valid .npz file (not a zip archive"),
    ("lasso", "truncated.npz", "is not a valid .npz file"),
    ("lasso", "objects.npz", "array 'X' in"),
    ("lda", "garbage.npy", "is not a valid .npy file"),
    ("lda", "negative_counts.npy", "X: expected non-negative integer counts"),
    ("mf", "nan_sparse.npz", "X: contains NaN or infinity"),
    ("lasso", "text_column.parquet", "data: columns ['name'] are not real numeric"),
    ("lasso", "text_target.csv", "target: columns ['y'] are not real numeric"),
    ("lasso", "header_only.csv", "header_only.csv has no rows"),
    ("lda", "empty.mtx", "empty.mtx is not a valid Matrix Market file"),
])
def test_bad_data_fails_in_one_line_before_any_cluster(files, no_cluster, capsys, model, name,
                                                       message):
    target = ["--target", "y"] if name.startswith(("text_", "header_")) else []
    err = _fails_in_one_line(capsys, ["fit", model, "--data", str(files / name), *target])
    assert message in err
    assert "pickled" not in err and "imputer" not in err.lower()  # numpy's / sklearn's words


def test_slurm_without_sbatch_says_so_in_one_line(files, no_cluster, capsys, monkeypatch,
                                                  tmp_path):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz"),
                                      "--cluster", "slurm"], code=1)
    assert "'sbatch' is not on PATH; SLURM is not installed" in err
    # the user's own mistakes are reported first (exit code 2), as on a SLURM machine
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz"),
                                      "--cluster", "slurm", "--walltime", "soon"])
    assert "duration: 'soon' is not a duration" in err


def test_a_cluster_that_cannot_be_joined_fails_in_one_line(files, capsys, tmp_path):
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz"),
                                      "--scheduler-file", str(tmp_path / "none.json"),
                                      "--wait-timeout", "0.5"], code=1)
    assert "scheduler-file: " in err and "did not appear within" in err
    err = _fails_in_one_line(capsys, ["fit", "lasso", "--data", str(files / "ok.npz"),
                                      "--scheduler", "tcp://127.0.0.1:1",
                                      "--wait-timeout", "1"], code=1)
    assert "cluster: " in err


def test_slurm_with_sbatch_goes_on_to_the_cluster(files, monkeypatch, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\nexit 1\n")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    started = []

    class Stop(Exception):
        pass

    @contextlib.contextmanager
    def fake_cluster(args):
        started.append(args.cluster)
        raise Stop("stop here")
        yield

    monkeypatch.setattr(cli, "make_cluster", fake_cluster)
    with pytest.raises(Stop, match="stop here"):
        cli.main(["fit", "lasso", "--data", str(files / "ok.npz"), "--cluster", "slurm"])
    assert started == ["slurm"]


def test_without_arguments_the_commands_are_listed(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "demo" in err and "fit" in err and "--help" in err
    assert "required: command" not in err


def test_help_shows_real_defaults_only_and_every_model_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # undo the line wrapping
    assert "(default: None)" not in text and "(default: False)" not in text
    for option in ("--max-iter", "--tol", "--random-state", "--cluster"):
        entry = text.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert len(entry.split()) > 3, (option, entry)  # more than the metavar: a help text
    workers = text.split(" --n-workers N_WORKERS ", 1)[1].split(" --jobs", 1)[0]
    assert workers.count("default") == 1, workers
    assert "(default: local)" in text and "(default: 01:00:00)" in text


@pytest.mark.parametrize("argv0, prog", [
    ("/venv/bin/dask-strads", "dask-strads"),
    ("/repo/dask_strads/__main__.py", "python -m dask_strads"),
    ("", "python -m dask_strads"),
])
def test_usage_names_the_command_the_user_ran(argv0, prog, monkeypatch, capsys):
    assert cli.program_name(argv0) == prog
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        cli.main(["fit", "lasso"])
    assert capsys.readouterr().err.startswith(f"{prog} fit: error: the following arguments "
                                              "are required: --data")
