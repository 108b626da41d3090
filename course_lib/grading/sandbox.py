"""Run code nobody trusts in processes it cannot climb out of: a supervisor per run and, on Linux,
namespaces of its own.

``Sandbox(command, ...)`` starts ``python -m course_lib.grading.sandbox``, the *supervisor*, in a
session of its own; the supervisor starts ``command`` and reports how it ended (one JSON line on its
standard output). The command talks back through a channel of length-prefixed frames on file descriptor
``CHANNEL_FD`` (:func:`send`), which a thread of the starter reads and checks before anything uses it.

What the command can reach with process ids (signals, ptrace, ``/proc``), by platform:

- **Linux with user namespaces** (allowed to ordinary users on most distributions; ``isolation()``
  says which case holds): the supervisor enters a new user, PID and mount namespace and forks a
  small init, PID 1 there, which mounts that namespace's own ``/proc`` and starts the command as PID 2
  in a session of its own, as uid 1000 of the namespace, without capabilities. Process ids then name
  only processes inside: its parent is that init, which ignores every signal sent from inside;
  ``kill(-1)`` and its process group reach only its own processes; no grader, other student or
  other program of yours can be named. When the command ends, the init ends and the kernel kills
  whatever it forked.
- **elsewhere** (macOS; Linux where namespaces are refused, as in some containers): the command runs
  in a session of its own under its supervisor. Killing its parent kills the supervisor, which the
  starter sees and charges to that run; its process group holds only its own processes. It still
  runs as your user, so code that finds the starter's process id, or signals every process it may
  (``kill(-1)``), can stop the starter and your other programs. Windows is not supported.

In both, the supervisor holds the read end of a *lifeline* pipe whose write end only the starter
has: when the starter stops the run or dies, whatever killed it, the supervisor kills everything
the run started.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache

CHANNEL_FD = 3  # the command writes its frames here
INSIDE_ID = 1000  # the command's uid and gid inside its user namespace: not 0, so exec drops every capability
MAX_HEADER = 1 << 16  # bytes of one frame's JSON header
_PREFIX = struct.Struct(">II")  # header length, payload length
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


class ProtocolError(Exception):
    """A frame from the sandboxed command that the protocol does not allow."""


def send(fd: int, header: dict, payload: bytes = b"") -> None:
    """Write one frame on ``fd``: a JSON header (what happened) and optional bytes (a value)."""
    head = json.dumps(header).encode()
    data = memoryview(_PREFIX.pack(len(head), len(payload)) + head + payload)
    while data:
        data = data[os.write(fd, data) :]


def signal_name(number: int) -> str:
    """``SIGKILL (Killed)``: the name and what the C library calls it."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    described = signal.strsignal(number)
    return f"{name} ({described})" if described else name


# == the starter's side ======================================================================


@dataclass
class Ending:
    """How a sandboxed command ended, as far as its starter can know."""

    isolation: str  # "namespaces" or "sessions" ("" when the supervisor never said)
    detail: str = ""
    exit_code: int | None = None
    signal: int | None = None
    peak_bytes: int | None = None  # the command's peak resident memory
    stopped: bool = False  # the starter stopped it
    supervisor_signal: int | None = None  # the supervisor itself was killed by this signal

    def describe(self) -> str:
        """One sentence for a person: what ended it and, where known, who."""
        if self.exit_code is not None:
            return f"the process exited with code {self.exit_code}"
        if self.signal is not None:
            if self.stopped and self.signal == signal.SIGKILL:
                return "the grader stopped it"
            source = "the notebook's own code, inside its sandbox,"
            if self.isolation != "namespaces":
                source = "a process of yours (most likely the notebook's own code)"
            peak = f": the process had used at most {self.peak_bytes / 2**30:.2f} GiB" if self.peak_bytes else ""
            return (
                f"the process was killed by {signal_name(self.signal)}, a signal the grader did not send: it came from "
                f"{source} or from the system (a crash, or the machine running out of memory{peak})"
            )
        if self.stopped:
            return "the grader stopped it"
        if self.supervisor_signal is not None:
            who = "probably the notebook's own code" if self.isolation != "namespaces" else "the system or another user"
            return f"its supervisor was killed by {signal_name(self.supervisor_signal)}, not by the grader ({who})"
        return "the process ended without saying how" + (f" ({self.detail})" if self.detail else "")


class Sandbox:
    """``command`` started under its supervisor: its frames, how it ended, and a way to stop all of it.

    ``stdin`` is written to the command's standard input; ``memory_bytes`` limits its address space
    and ``file_bytes`` the size of any file it writes (both inherited by what it starts)."""

    def __init__(
        self,
        command: list[str],
        *,
        cwd: str | os.PathLike,
        env: dict[str, str],
        stdin: bytes = b"",
        memory_bytes: int | None = None,
        file_bytes: int | None = None,
        max_payload: int = 1 << 28,
    ) -> None:
        if os.name != "posix":
            raise OSError("the sandbox needs POSIX processes (Linux or macOS); on Windows, run it in WSL")
        channel, channel_w = os.pipe()
        lifeline_r, self._lifeline = os.pipe()
        config = {"channel": channel_w, "lifeline": lifeline_r, "memory": memory_bytes, "file": file_bytes}
        try:
            self._supervisor = subprocess.Popen(
                [sys.executable, "-m", "course_lib.grading.sandbox", json.dumps(config), *command],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(channel_w, lifeline_r),
                start_new_session=True,
            )
        finally:
            os.close(channel_w)
            os.close(lifeline_r)
        self._events: queue.Queue = queue.Queue()
        self._reports: list[dict] = []
        self._done = threading.Event()
        self._ended = self._stopped = False
        self._lock = threading.Lock()
        starts = [
            (self._feed, stdin),
            (self._read_frames, os.fdopen(channel, "rb"), max_payload),
            (self._read_reports,),
        ]
        for target, *args in starts:
            threading.Thread(target=target, args=args, daemon=True).start()

    def _feed(self, data: bytes) -> None:
        try:
            self._supervisor.stdin.write(data)
            self._supervisor.stdin.close()
        except OSError:  # the command ended before reading it all
            pass

    def _read_frames(self, stream, max_payload: int) -> None:
        """Frames, checked for size and form; one bad frame ends the reading (the rest is not trusted)."""
        with stream:
            try:
                while True:
                    prefix = stream.read(_PREFIX.size)
                    if len(prefix) < _PREFIX.size:
                        break
                    head_size, payload_size = _PREFIX.unpack(prefix)
                    if head_size > MAX_HEADER or payload_size > max_payload:
                        raise ProtocolError(f"a frame of {head_size + payload_size:,} bytes, more than allowed")
                    head, payload = stream.read(head_size), stream.read(payload_size)
                    if len(head) < head_size or len(payload) < payload_size:
                        break  # cut short: the command died while writing
                    header = json.loads(head)
                    if not isinstance(header, dict):
                        raise ProtocolError("a frame whose header is not a JSON object")
                    self._events.put(("frame", {**header, "payload": payload}))
            except (ProtocolError, ValueError) as err:
                self._events.put(("bad", f"{type(err).__name__}: {err}"[:300]))
            except OSError:
                pass
        self._events.put(("eof", None))

    def _read_reports(self) -> None:
        for line in iter(lambda: self._supervisor.stdout.readline(MAX_HEADER), b""):
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if isinstance(report, dict):
                self._reports.append(report)
        self._supervisor.wait()
        self._done.set()
        self._events.put(("ended", self._supervisor.returncode))

    def receive(self, timeout: float) -> dict | None:
        """The next frame's header (its bytes under ``"payload"``), or None once the command has ended
        and all it sent is read. TimeoutError if nothing comes in ``timeout`` seconds; ProtocolError
        for a frame the protocol does not allow."""
        while True:
            try:  # once the supervisor has ended, what is left in the channel is there already
                kind, value = self._events.get(timeout=min(timeout, 1.0) if self._ended else timeout)
            except queue.Empty:
                if self._ended:
                    return None
                raise TimeoutError from None
            if kind == "frame":
                return value
            if kind == "bad":
                raise ProtocolError(value)
            if kind == "eof":
                return None
            self._ended = value == 0  # it reported the command's end (a killed supervisor did not)

    def stop(self) -> None:
        """Kill everything the run started (idempotent)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                os.close(self._lifeline)
        groups = [self._supervisor.pid] + [r["pid"] for r in self._reports if r.get("isolation") == "sessions"]
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def ending(self, wait: float = 10.0) -> Ending:
        """How the command ended; stopped first if its supervisor has not finished within ``wait`` seconds."""
        if not self._done.wait(wait):
            self.stop()
            self._done.wait()
        start = next((r for r in self._reports if "isolation" in r), {})
        end = next((r for r in self._reports if "exit" in r or "signal" in r), {})
        code = self._supervisor.returncode
        return Ending(
            isolation=str(start.get("isolation", "")),
            detail=str(start.get("detail") or next((r["error"] for r in self._reports if "error" in r), "")),
            exit_code=end.get("exit"),
            signal=end.get("signal"),
            peak_bytes=end.get("peak"),
            stopped=self._stopped,
            supervisor_signal=-code if code is not None and code < 0 else None,
        )


@lru_cache(maxsize=1)
def isolation() -> tuple[str, str]:
    """("namespaces" or "sessions", in words) on this machine: found by a sandbox that runs nothing."""
    box = Sandbox([sys.executable, "-c", "pass"], cwd=tempfile.gettempdir(), env=dict(os.environ))
    ending = box.ending()
    box.stop()
    if not ending.isolation:
        raise OSError(f"the sandbox's supervisor could not start a process: {ending.describe()}")
    return ending.isolation, ending.detail


# == the supervisor's side (python -m course_lib.grading.sandbox CONFIG COMMAND...) ===========


def _report(**fields) -> None:
    os.write(1, json.dumps(fields).encode() + b"\n")


def _unshare() -> str | None:
    """Enter new user, PID and mount namespaces (the PID one holds for the children); None if done, else why not."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no namespaces"
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS) != 0:
        return f"this machine refuses new namespaces ({os.strerror(ctypes.get_errno())})"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{INSIDE_ID} {uid} 1"), ("gid_map", f"{INSIDE_ID} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return None


def _mount_proc() -> bool:
    """Mount, for the init of the new PID namespace, a /proc that shows only that namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    private = libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0
    return private and libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0


def _start(config: dict, command: list[str]) -> int:
    """Fork the command: its own session, the limits, output discarded, the channel on CHANNEL_FD."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        import resource

        limits = ((resource.RLIMIT_AS, config["memory"]), (resource.RLIMIT_FSIZE, config["file"]))
        for limit, value in (*limits, (resource.RLIMIT_CORE, 0)):
            try:
                if value is not None:
                    resource.setrlimit(limit, (value, value))
            except (ValueError, OSError):  # macOS may refuse RLIMIT_AS: INSTRUCTORS.md says so
                pass
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(config["lifeline"])
        if config["channel"] != CHANNEL_FD:
            os.dup2(config["channel"], CHANNEL_FD)
            os.close(config["channel"])
        os.execv(command[0], command)
    finally:
        os._exit(127)


def _release(config: dict) -> None:
    """Let go of the command's standard input and channel: only the command holds them now."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.close(config["channel"])


def _report_end(status: int, usage) -> None:
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if os.WIFSIGNALED(status):
        _report(signal=os.WTERMSIG(status), peak=peak)
    else:
        _report(exit=os.waitstatus_to_exitcode(status), peak=peak)


def _reap_and_report(pid: int) -> None:
    """As PID 1: reap every orphan of the namespace until the command ends, then report how it ended."""
    while True:
        done, status, usage = os.wait4(-1, 0)
        if done == pid:
            return _report_end(status, usage)


def _watch(child: int, lifeline: int, groups: list[int], report: bool) -> None:
    """Wait for ``child`` (reporting how it ended if ``report``) while watching the lifeline: when the
    starter's end closes (it stopped the run, or died) kill every group, this process's too. No thread:
    after unshare(CLONE_NEWPID) a process cannot start one, so SIGCHLD wakes the select instead."""
    wakeup, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        done, status, usage = os.wait4(child, os.WNOHANG)
        if done:
            break
        ready, _, _ = select.select([lifeline, wakeup], [], [])
        if lifeline in ready and not os.read(lifeline, 1):
            for group in groups:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if wakeup in ready:
            os.read(wakeup, 512)
    if report:
        _report_end(status, usage)


def _init(config: dict, command: list[str]) -> None:
    """PID 1 of the new namespace: start the command, report its end; its own end kills what is left."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 ignores every signal it has no handler for
    private = _mount_proc()
    pid = _start(config, command)
    os.close(config["lifeline"])  # the supervisor watches it
    _release(config)
    detail = "own user, PID and mount namespaces" + ("" if private else "; /proc of the host still visible")
    _report(isolation="namespaces", detail=detail)
    _reap_and_report(pid)
    os._exit(0)


def _supervise(config: dict, command: list[str]) -> None:
    """The supervisor: start ``command`` as isolated as this machine allows and report how it ended."""
    try:
        why_not = _unshare()
        if why_not is None:
            child = os.fork()
            if child == 0:
                _init(config, command)
            groups = [os.getpgrp()]
        else:
            child = _start(config, command)
            _report(isolation="sessions", detail=f"own session under a supervisor; {why_not}", pid=child)
            groups = [child, os.getpgrp()]
        _release(config)
        _watch(child, config["lifeline"], groups, report=why_not is not None)
    except BaseException as err:  # say why instead of dying silently
        _report(error=f"{type(err).__name__}: {err}"[:300])
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    _supervise(json.loads(sys.argv[1]), sys.argv[2:])
