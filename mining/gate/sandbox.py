"""Run untrusted commands (kernel builds, harness runs, the problem's reference) in a bubblewrap
sandbox, with limits that hold for the whole process tree. docs/security.md says what is isolated.

Inside the sandbox a command sees: the system directories read-only (/usr and the /bin, /lib
links; a few /etc files the loader needs), its toolchain read-only, the paths its caller names
(`readable` read-only, `writable` read-write; normally one fresh work directory), a private
/tmp, a minimal /dev (plus /dev/nvidia* and /sys for GPU runs) and its own /proc. It does not
see $HOME, the store, the gate cache, the CPU runtime cache, other runs or the network (new
network namespace: loopback of its own only). The environment is rebuilt from scratch. When
the gate runs as root, the command runs as uid/gid 65534 (nobody) with no capabilities.

Limits: a wall-clock timeout and a resident-memory limit on the whole process tree (sampled
from /proc, not RLIMIT_AS: AddressSanitizer and the CUDA driver reserve terabytes of address
space), an optional address-space limit for compilers, captured output capped (a printf flood
is drained and dropped, never held), and a PID namespace: when the command's first process dies
or is killed, the kernel kills every process in the namespace, `setsid` children included.
bwrap dies with its parent (--die-with-parent) and is itself killed when the gate process dies
(PR_SET_PDEATHSIG), so a killed `skills mine` leaves no harness behind.

Without bubblewrap (or without namespaces) `isolation()` is None: the gate refuses untrusted
input unless the user passes --trust, and then runs commands in a process group only.
"""
from __future__ import annotations

import ctypes
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional, Sequence

from mining.gate.errors import BadInput

SANDBOX_UID = 65534  # nobody
MAX_OUTPUT = 16 << 20  # bytes kept per stream; the rest is read and dropped
TMPFS_BYTES = 256 << 20
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# the loader cache and name-service files; /etc as a whole holds secrets (shadow, ssh keys)
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
              "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/os-release")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PR_SET_PDEATHSIG = 1


@dataclass
class RunResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool = False
    mem_exceeded: bool = False
    peak_rss_mb: float = 0.0
    output_truncated: bool = False
    sandboxed: bool = False

    @property
    def signal_name(self) -> Optional[str]:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.mem_exceeded


# --------------------------------------------------------------------------- availability
def bwrap_path() -> Optional[str]:
    """KS_BWRAP names the binary (a path, or "none" to turn isolation off); else bwrap on PATH."""
    env = os.environ.get("KS_BWRAP")
    if env is not None:
        return None if env in ("", "none") else (env if os.access(env, os.X_OK) else None)
    return shutil.which("bwrap")


@lru_cache(maxsize=4)
def _probe(bwrap: str) -> Optional[str]:
    """None when bwrap can build a sandbox here, else why not (one line)."""
    try:
        res = subprocess.run([bwrap, *_namespace_args(), *_system_binds(), "--", "/bin/true"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap}: {exc}"
    if res.returncode != 0:
        return f"{bwrap} cannot create namespaces here: {(res.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def isolation() -> Optional[str]:
    """The bwrap binary when sandboxing works on this machine, else None."""
    exe = bwrap_path()
    return exe if exe and _probe(exe) is None else None


def isolation_problem() -> str:
    exe = bwrap_path()
    if not exe:
        return "bubblewrap (bwrap) is not installed"
    return _probe(exe) or ""


def require_isolation(trust: bool) -> None:
    """Refuse untrusted input when no sandbox is available, unless the user said --trust."""
    if trust or isolation():
        return
    raise BadInput(f"no sandbox: {isolation_problem()}; refusing to build and run untrusted code "
                   "(install bubblewrap, or pass --trust to run it without isolation)")


# --------------------------------------------------------------------------- the bwrap command line
def _namespace_args() -> list[str]:
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        args.append("--unshare-user")  # an unprivileged bwrap needs a user namespace for its mounts
    return args


def _system_binds() -> list[str]:
    args: list[str] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    # bwrap makes the parents of bind targets 0700; the unprivileged uid must traverse /etc (on Ubuntu
    # /usr/local/cuda -> /etc/alternatives/cuda, and nvcc crashes when it cannot resolve its own folder)
    args += ["--perms", "0755", "--dir", "/etc"]
    for f in _ETC_FILES:
        args += ["--ro-bind-try", f, f]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp"]
    return args


_SYSTEM_PREFIXES = tuple(d + "/" for d in _SYSTEM_DIRS)


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def tool_root(exe: str) -> Optional[Path]:
    """The install folder of a tool outside the system dirs (e.g. /opt/cuda for /opt/cuda/bin/nvcc)."""
    real = os.path.realpath(shutil.which(exe) or exe)
    if _covered(real, _SYSTEM_DIRS):
        return None
    p = Path(real).parent
    return p.parent if p.name == "bin" else p


def python_roots() -> list[Path]:
    """What the sandboxed reference worker needs to start this interpreter with numpy."""
    roots = {Path(os.path.realpath(sys.prefix)), Path(os.path.realpath(sys.base_prefix)),
             Path(os.path.realpath(sys.executable)).parent.parent, Path(sys.prefix)}
    return sorted(r for r in roots if not _covered(str(r), _SYSTEM_DIRS))


def _gpu_binds() -> list[str]:
    args: list[str] = []
    for dev in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(dev), str(dev)]
    if Path("/dev/dri").exists():
        args += ["--dev-bind-try", "/dev/dri", "/dev/dri"]
    args += ["--ro-bind-try", "/sys", "/sys"]  # the driver reads PCI/NUMA topology
    return args


def bwrap_command(bwrap: str, cmd: Sequence[str], *, cwd: Optional[Path], env: dict[str, str],
                  readable: Sequence[Path] = (), writable: Sequence[Path] = (), gpu: bool = False) -> list[str]:
    args = [bwrap, *_namespace_args(), *_system_binds()]
    if gpu:
        args += _gpu_binds()
    made: set[str] = {"/", "/tmp", "/proc", "/dev"}
    binds: list[tuple[str, str]] = []
    for mode, paths in (("--ro-bind", readable), ("--bind", writable)):
        for p in paths:
            real = os.path.realpath(p)
            if not os.path.exists(real) or _covered(real, _SYSTEM_DIRS):
                continue
            binds.append((mode, real))
            link = os.path.abspath(p)
            if link != real and os.path.realpath(os.path.dirname(link)) == os.path.dirname(link):
                binds.append(("--symlink", link))  # the path as the caller spells it
    # shallow destinations first, so a read-write folder can sit inside a read-only one;
    # ancestors are made world-traversable (bwrap would copy the host's 0700 of /root, /work)
    for mode, dest in sorted(set(binds), key=lambda b: (b[1].count("/"), b[0] != "--ro-bind", b[1])):
        anc = Path(dest).parent
        chain = []
        while str(anc) not in made and str(anc) != "/":
            chain.append(str(anc))
            anc = anc.parent
        for d in reversed(chain):
            args += ["--perms", "0755", "--dir", d]
            made.add(d)
        if mode == "--symlink":
            args += ["--symlink", os.path.realpath(dest), dest]
        else:
            args += [mode, dest, dest]
        made.add(dest)
    args.append("--clearenv")
    for k, v in env.items():
        args += ["--setenv", k, v]
    if cwd is not None:
        args += ["--chdir", str(cwd)]
    args.append("--")
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise BadInput("sandbox: running as root needs setpriv (util-linux) to drop to an unprivileged uid")
        args += [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all", "--"]
    return args + list(cmd)


def grant_writable(path: Path) -> None:
    """Let the sandbox uid write a work folder (and what is already in it) when we run as root."""
    if os.geteuid() != 0 or not isolation():
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, SANDBOX_UID, SANDBOX_UID)
        for name in files:
            os.chown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)


def reclaim(path: Path) -> None:
    """Give a sandbox's output back to the gate's user before it goes into a shared cache, so that
    no other process of the sandbox uid can change it later."""
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]:
        if os.path.isdir(path):
            os.chown(root, 0, 0, follow_symlinks=False)
        for name in files:
            os.chown(os.path.join(root, name), 0, 0, follow_symlinks=False)


def sandbox_env(extra: Optional[dict[str, str]], cwd: Optional[Path], tool: str) -> dict[str, str]:
    """A scrubbed environment: nothing of the gate's own (no tokens, no keys) reaches the command."""
    path = _PATH
    root = tool_root(tool)
    if root is not None:
        path = f"{root / 'bin'}:{path}"
    env = {"PATH": path, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp",
           "HOME": str(cwd) if cwd else "/tmp"}
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------- reading what a run wrote
def open_output(path: Path):
    """Open a file a sandboxed run wrote, refusing a symlink (it could point at a host file the
    gate may read and the run may not) and anything but a regular file. OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        import stat as _stat

        if not _stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_output(path: Path, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes of a file a run wrote (one more shows it is too long)."""
    with open_output(path) as fh:
        return fh.read(max_bytes + 1)


# --------------------------------------------------------------------------- limits
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def die_with_parent() -> None:
    """PR_SET_PDEATHSIG(SIGKILL) for the calling process (pool workers, launched children)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def gate_worker_init() -> None:
    """Initializer of processes that run gates for a parent (`skills mine`/`optimize` pools):
    Ctrl-C is the parent's to handle (no worker tracebacks); SIGTERM unwinds (temporary folders
    removed, sandboxes killed); the parent's death kills them (no orphans)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _term(*_):
        raise SystemExit(143)
    signal.signal(signal.SIGTERM, _term)
    die_with_parent()


def _child_setup(as_mb: Optional[float]):
    def setup() -> None:  # runs in the child before exec
        os.setsid()
        die_with_parent()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if as_mb:
            limit = int(as_mb * (1 << 20))
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return setup


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_mb(root_pid: int) -> float:
    """Resident memory of root_pid and all its descendants (setsid children included)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    total_kb, todo, seen = 0, [root_pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total_kb += int(fh.read().split()[1]) * _PAGE_KB
        except (OSError, ValueError, IndexError):
            pass
        todo.extend(children.get(pid, ()))
    return total_kb / 1024.0


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_ABORT_LOCK = threading.Lock()
_abort_generation = 0


def abort_runs() -> None:
    """Kill every run started so far, in every thread (Ctrl-C or SIGTERM while gate threads wait)."""
    global _abort_generation
    with _ABORT_LOCK:
        _abort_generation += 1


def run_limited(cmd: Sequence[str], *, cwd: Optional[Path] = None, timeout_s: float = 60.0,
                mem_mb: float = 4096.0, env: Optional[dict[str, str]] = None,
                readable: Sequence[Path] = (), writable: Sequence[Path] = (), gpu: bool = False,
                as_mb: Optional[float] = None, max_output: int = MAX_OUTPUT, poll_s: float = 0.05,
                cancel: Optional[threading.Event] = None) -> RunResult:
    """Run cmd sandboxed (when bubblewrap works here) with a timeout and memory limit on its tree.

    `writable` folders are the only places it can write; `readable` paths are shown read-only.
    Without isolation (the caller checked --trust) it runs in a process group with the same limits
    but the gate's own view of the machine. Setting `cancel` kills the run (as a timeout would)."""
    start = time.perf_counter()
    generation = _abort_generation
    bwrap = isolation()
    run_env = sandbox_env(env, cwd, cmd[0])
    tools = [r for r in (tool_root(cmd[0]),) if r is not None]
    if cmd[0] == sys.executable:  # a venv's python needs the venv and the interpreter it points at
        tools += python_roots()
    elif os.path.isabs(cmd[0]) and not _covered(os.path.realpath(cmd[0]), _SYSTEM_DIRS):
        cmd = [os.path.realpath(cmd[0]), *cmd[1:]]  # its folder is shown at its real place
    if bwrap:
        for w in writable:
            grant_writable(Path(w))
        argv = bwrap_command(bwrap, cmd, cwd=cwd, env=run_env, readable=[*tools, *readable],
                             writable=writable, gpu=gpu)
        popen_cwd = None
    else:
        argv, popen_cwd = list(cmd), cwd
        run_env = {**run_env, **{k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NVIDIA_"))}}
    proc = subprocess.Popen(argv, cwd=popen_cwd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, preexec_fn=_child_setup(as_mb))
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    truncated = False
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
    timed_out = mem_exceeded = False
    peak = 0.0
    deadline = start + timeout_s
    next_mem_check = start + 0.05
    open_fds = len(bufs)
    try:
        while open_fds:
            now = time.perf_counter()
            for key, _ in sel.select(timeout=min(poll_s, max(0.0, deadline - now))):
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    open_fds -= 1
                    continue
                buf = bufs[key.fd]
                room = max_output - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > room:
                    truncated = True  # read and dropped: the child cannot grow this process
            now = time.perf_counter()
            if now >= next_mem_check:
                rss = _tree_rss_mb(proc.pid)
                peak = max(peak, rss)
                next_mem_check = now + 0.2
                if rss > mem_mb:
                    mem_exceeded = True
            if now >= deadline:
                timed_out = True
            if timed_out or mem_exceeded or (cancel is not None and cancel.is_set()) or \
                    generation != _abort_generation:
                _kill_tree(proc)
                break
        try:
            proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:  # closed its pipes but kept running
            timed_out = True
            _kill_tree(proc)
            proc.wait()
    finally:
        sel.close()
        _kill_tree(proc)  # grandchildren left in the group (unsandboxed runs) go too
        proc.stdout.close()
        proc.stderr.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = bytes(bufs[next(iter(bufs))]).decode(errors="replace")
    err = bytes(list(bufs.values())[1]).decode(errors="replace")
    if truncated:
        err += f"\n[kernel-skills: output over {max_output >> 20} MB per stream was dropped]"
    rc = proc.returncode
    if bwrap and rc is not None and 128 < rc < 128 + 65:  # bwrap's init reports a signal death as 128 + signal
        rc = -(rc - 128)
    return RunResult(returncode=rc, stdout=out, stderr=err, wall_s=time.perf_counter() - start,
                     timed_out=timed_out, mem_exceeded=mem_exceeded, peak_rss_mb=peak,
                     output_truncated=truncated, sandboxed=bool(bwrap))
