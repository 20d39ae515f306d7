"""`skills corpora fetch llvm`: Debian source package (apt-get faked here), a checkout, a git URL."""
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _backend_support import TOY
from cli import app
from corpora.backends.llvm import FetchError, fetch_llvm, list_targets

runner = CliRunner()


def _monorepo(tmp_path: Path, version=(15, 0, 6)) -> Path:
    """A minimal llvm-project layout around the toy tree."""
    root = tmp_path / "llvm-project"
    shutil.copytree(TOY / "lib", root / "llvm" / "lib")
    shutil.copytree(TOY / "include", root / "llvm" / "include")
    (root / "llvm" / "include" / "llvm" / "Config").mkdir(parents=True)
    (root / "llvm" / "include" / "llvm" / "Config" / "config.h.cmake").write_text("#cmakedefine01 LLVM_X\n")
    (root / "llvm" / "utils" / "gn" / "llvm" / "lib" / "Target" / "Lark").mkdir(parents=True)
    (root / "llvm" / "utils" / "gn" / "llvm" / "lib" / "Target" / "Lark" / "BUILD.gn").write_text("x\n")
    major, minor, patch = version
    (root / "llvm" / "CMakeLists.txt").write_text(
        f"set(LLVM_VERSION_MAJOR {major})\nset(LLVM_VERSION_MINOR {minor})\nset(LLVM_VERSION_PATCH {patch})\n")
    return root


def test_fetch_from_checkout_and_reuse(tmp_path):
    src = _monorepo(tmp_path)
    dest = tmp_path / "out"
    r = fetch_llvm(15, dest=dest, source=str(src))
    assert r.method == "checkout" and r.version == "15.0.6" and not r.reused
    assert r.targets == ["Kite", "Lark", "Wren"] == list_targets(dest)
    assert (dest / "include" / "llvm" / "BinaryFormat" / "ELFRelocs" / "Lark.def").is_file()
    assert (dest / "include" / "llvm" / "Config" / "config.h.cmake").is_file()
    assert not (dest / "utils").exists() and not (dest / "CMakeLists.txt").exists()
    assert json.loads((dest / "fetch.json").read_text())["targets"] == r.targets
    again = fetch_llvm(15, dest=dest, source=str(src))
    assert again.reused
    with pytest.raises(FetchError, match="holds LLVM 15.0.6"):
        fetch_llvm(14, dest=tmp_path / "out14", source=str(src))


def test_fetch_from_git_url(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("LOUD SKIP: git is not installed")
    src = _monorepo(tmp_path)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "llvm"]):
        subprocess.run(cmd, cwd=src, check=True, env=env)
    r = fetch_llvm(15, dest=tmp_path / "g", source=f"file://{src}")
    assert r.method == "git" and r.version == "15.0.6" and r.targets == ["Kite", "Lark", "Wren"]
    assert not (tmp_path / "g" / "utils").exists()


def test_fetch_from_debian_source_package(tmp_path, monkeypatch):
    """apt-get is replaced by a script that records its arguments and 'downloads' an orig
    tarball laid out like Debian's; fetch_llvm must extract only the wanted folders."""
    tarball_src = _monorepo(tmp_path)
    top = tmp_path / "pkg" / "llvm-toolchain-15_15.0.6"
    shutil.copytree(tarball_src, top)
    tar_path = tmp_path / "llvm-toolchain-15_15.0.6.orig.tar.xz"
    with tarfile.open(tar_path, "w:xz") as tf:
        tf.add(top, arcname=top.name)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "apt.log"
    script = bindir / "apt-get"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {log}
for a in "$@"; do case "$a" in Dir::Etc::SourceParts=*) cat "${{a#Dir::Etc::SourceParts=}}/src.sources" >> {log};; esac; done
case "$*" in *"source --download-only llvm-toolchain-15"*) cp {tar_path} . ;; esac
exit 0
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    r = fetch_llvm(15, dest=tmp_path / "deb")
    assert r.method == "debian-source-package" and r.version == "15.0.6"
    assert r.targets == ["Kite", "Lark", "Wren"]
    assert not (tmp_path / "deb" / "utils").exists()  # the gn copy of lib/Target is not extracted
    text = log.read_text()
    assert "Types: deb-src" in text and "Components: main" in text and "update" in text
    assert "Dir::Etc::SourceList=/dev/null" in text


def test_fetch_bad_input(tmp_path):
    with pytest.raises(FetchError, match="neither 'debian', a git URL, nor an existing folder"):
        fetch_llvm(15, dest=tmp_path / "x", source=str(tmp_path / "missing"))
    (tmp_path / "notllvm").mkdir()
    with pytest.raises(FetchError, match="not an LLVM checkout"):
        fetch_llvm(15, dest=tmp_path / "y", source=str(tmp_path / "notllvm"))
    with pytest.raises(FetchError, match="major version"):
        fetch_llvm("15.0", dest=tmp_path / "z", source=str(TOY))


def test_cli_fetch(tmp_path):
    r = runner.invoke(app, ["corpora", "fetch", "llvm", "--source", str(TOY), "--dest", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["targets"] == ["Kite", "Lark", "Wren"]
    r = runner.invoke(app, ["corpora", "fetch", "gcc", "--dest", str(tmp_path / "d")])
    assert r.exit_code == 2 and "unknown source 'gcc'" in r.stderr and "sources.toml" in r.stderr
    r = runner.invoke(app, ["corpora", "fetch", "llvm", "--source", str(tmp_path / "nope"), "--dest", str(tmp_path / "e")])
    assert r.exit_code == 2 and r.stderr.startswith("error: ")
