"""`skills corpora fetch` for kernel collections: a local git repository and a local sdist made here (no network)."""
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from corpora.kernel_sources import SourceError, SourceMissing, fetch_source, source_dir
from skills.sources import record_source, stored_sources

runner = CliRunner()
KERNEL = "__global__ void add(const float* a, float* b, int n) { int i = threadIdx.x; if (i < n) b[i] += a[i]; }\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str, str]:
    repo = tmp_path / "kernels-repo"
    (repo / "src").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "add.cu").write_text(KERNEL)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v1")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "src" / "add.cu").write_text(KERNEL.replace("+=", "-="))
    _git(repo, "commit", "-qam", "v2")
    return repo, first, _git(repo, "rev-parse", "HEAD")


def _registry(tmp_path: Path, first: str) -> Path:
    reg = tmp_path / "sources.toml"
    reg.write_text(f'[toy]\nurl = "https://example.invalid/toy"\nkind = "git"\ncommit = "{first}"\n'
                   '[toypkg]\nkind = "sdist"\npackage = "toypkg"\nversion = "1.0"\nsubdir = "csrc"\n')
    return reg


def test_registered_name_from_local_repo_pins_commit_and_records(tmp_path):
    repo, first, _ = _repo(tmp_path)
    store = tmp_path / "store"
    dest = fetch_source("toy", store, from_path=repo, registry_path=_registry(tmp_path, first), record=record_source)
    assert dest == store / "sources" / "toy" == source_dir("toy", store)
    assert (dest / "src" / "add.cu").read_text() == KERNEL  # the pinned (first) commit, not HEAD
    info = json.loads((dest / "SOURCE.json").read_text())
    assert info["name"] == "toy" and info["kind"] == "git" and info["commit"] == first
    assert info["url"] == "https://example.invalid/toy" and info["fetched_from"] == str(repo) and info["fetched_at"]
    rows = stored_sources(store)
    assert [(r["name"], r["commit"], r["kind"]) for r in rows] == [("toy", first, "git")]
    # same commit again: reused, nothing rewritten
    mtime = (dest / "SOURCE.json").stat().st_mtime_ns
    fetch_source("toy", store, from_path=repo, registry_path=_registry(tmp_path, first))
    assert (dest / "SOURCE.json").stat().st_mtime_ns == mtime


def test_local_path_and_file_url_default_to_head(tmp_path):
    repo, _, head = _repo(tmp_path)
    store = tmp_path / "s"
    d = fetch_source(str(repo), store, record=record_source)
    assert d.name == "kernels-repo" and json.loads((d / "SOURCE.json").read_text())["commit"] == head
    d2 = fetch_source(f"file://{repo}", tmp_path / "s2")
    assert "-=" in (d2 / "src" / "add.cu").read_text()


def test_bad_inputs_leave_nothing(tmp_path):
    repo, first, _ = _repo(tmp_path)
    store = tmp_path / "store"
    with pytest.raises(SourceError, match="commit 0123abcd is not in"):
        fetch_source(str(repo), store, commit="0123abcd")
    assert not (store / "sources" / "kernels-repo").exists()
    assert [p.name for p in (store / "sources").iterdir()] == []  # no staging folder left behind
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(SourceError, match="not a git repository"):
        fetch_source(str(plain), store)
    with pytest.raises(SourceError, match="unknown source 'nosuch'"):
        fetch_source("nosuch", store, registry_path=_registry(tmp_path, first))
    with pytest.raises(SourceMissing, match="run: skills corpora fetch toy"):
        source_dir("toy", store)


def test_sdist_from_local_archive(tmp_path):
    pkg = tmp_path / "toypkg-1.0"
    (pkg / "csrc").mkdir(parents=True)
    (pkg / "csrc" / "k.cu").write_text(KERNEL)
    archive = tmp_path / "toypkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(pkg, arcname="toypkg-1.0")
    store = tmp_path / "store"
    d = fetch_source("toypkg", store, from_path=archive, registry_path=_registry(tmp_path, "0" * 40))
    assert (d / "csrc" / "k.cu").read_text() == KERNEL
    info = json.loads((d / "SOURCE.json").read_text())
    assert info["kind"] == "sdist" and info["version"] == "1.0" and info["subdir"] == "csrc"


def test_cli_fetch_name_with_from(tmp_path, monkeypatch):
    repo, _, head = _repo(tmp_path)
    store = tmp_path / "store"
    r = runner.invoke(app, ["corpora", "fetch", str(repo), "--store", str(store), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["commit"] == head
    assert stored_sources(store)[0]["name"] == "kernels-repo"
    r = runner.invoke(app, ["corpora", "fetch", "nosuch-source", "--store", str(store)])
    assert r.exit_code == 2 and "unknown source 'nosuch-source'" in r.output
