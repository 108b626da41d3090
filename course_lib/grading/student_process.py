"""The student's process: run one notebook's cells and call its exercise functions, inside the sandbox.

Started by the grader as ``python -m course_lib.grading.student_process`` under
:mod:`course_lib.grading.sandbox` (which already set the memory and file-size limits). It reads the job
from its standard input (the cells to run, where each exercise is checked, the cases' inputs: never the
expected answers), refuses writes, deletes and new processes outside its working folder (an audit
hook), and reports on ``sandbox.CHANNEL_FD``: which step starts (so that a death can be charged to it),
how each cell ended, and what each exercise function returned, as plain tensors and values only.
Nothing here is trusted by the grader: a student's cell can patch any of it, and the grader checks
every report.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from .sandbox import CHANNEL_FD, send


class StepTimeout(BaseException):
    """Raised when a cell or an exercise runs past the time limit."""


def _out_of_memory(err: BaseException) -> bool:
    """The memory limit was reached: Python's MemoryError, or torch's allocator refusing."""
    return isinstance(err, MemoryError) or "can't allocate memory" in str(err)


def _error(err: BaseException) -> dict:
    return {
        "error": f"{type(err).__name__}: {err}"[:300],
        "exception": type(err).__name__,
        "memory": _out_of_memory(err),
    }


def _result(fn, args: tuple, bans: list[str]) -> tuple[dict, bytes]:
    """What one call returned, as a header and the value's bytes (read back with weights_only=True),
    with the exercise's banned functions made unavailable (:func:`course_lib.exercises.banned`) and
    an input changed in place reported (:func:`course_lib.exercises.call`)."""
    from course_lib.exercises import call, plain

    try:
        if bans:
            from course_lib.exercises import BanBypassed, banned, banned_use

            use = banned_use(bans, fn)
            if use is not None:
                raise BanBypassed(use)
            with banned(bans, fn):
                returned = call(fn, args)
        else:
            returned = call(fn, args)
    except StepTimeout:
        raise
    except BaseException as err:  # the student's function raising is a result to report
        return _error(err), b""
    try:
        buffer = io.BytesIO()
        torch.save(plain(returned), buffer)  # what check() compares too: one rule for a returned value
    except (TypeError, ValueError) as err:
        return {"unsent": str(err)[:300]}, b""
    except Exception as err:
        return {"unsent": f"an object of type {type(returned).__name__} that could not be sent back ({err})"[:300]}, b""
    return {}, buffer.getvalue()


def _guard(root: Path) -> None:
    """Refuse writes, deletes and new processes outside ``root`` from now on (an audit hook)."""
    allowed = (str(root.resolve()), "/dev/null", "/dev/shm")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    path_events = {"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.link"}
    path_events |= {"os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "os.removexattr", "os.setxattr"}
    spawn_events = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"}
    spawn_events |= {"os.forkpty", "pty.spawn"}
    realpath, startswith, fspath = os.path.realpath, str.startswith, os.fspath

    def inside(path: Any) -> bool:
        if isinstance(path, int) or path is None:
            return True
        try:
            resolved = realpath(fspath(path))
        except Exception:
            return False
        return any(resolved == a or startswith(resolved, a + os.sep) for a in allowed)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(m in mode for m in "wax+")) or bool((flags or 0) & write_flags)
            if writing and not inside(path):
                raise PermissionError(f"grading: writing {path!r} outside the working folder is not allowed")
        elif event in path_events:
            for path in args[:2] if event in ("os.rename", "os.link", "os.symlink") else args[:1]:
                if not inside(path):
                    raise PermissionError(f"grading: changing {path!r} outside the working folder is not allowed")
        elif event in spawn_events:
            raise PermissionError("grading: starting other processes is not allowed")

    sys.addaudithook(hook)


def main() -> None:  # pragma: no cover - runs in the sandbox (tested through the grader)
    """Run the job read from stdin, reporting each step on CHANNEL_FD."""
    job = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    torch.set_num_threads(int(os.environ.get("COURSE_THREADS", "1")))

    def report(header: dict, payload: bytes = b"") -> None:
        send(CHANNEL_FD, header, payload)

    def on_alarm(signum, frame):
        raise StepTimeout

    signal.signal(signal.SIGALRM, on_alarm)

    def timed(kind: str, what: Any) -> None:
        report({"event": "step", "kind": kind, "what": what})
        signal.setitimer(signal.ITIMER_REAL, job["timeout"])

    def untimed() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    from IPython.core.interactiveshell import InteractiveShell

    namespace = InteractiveShell.instance().user_ns
    _guard(Path.cwd())
    skip, done = set(job["skip"]), set(job["done"])
    for position, (number, code) in enumerate(job["cells"]):
        if position not in skip:
            ended: dict = {"error": None}
            try:
                timed("cell", position)
                exec(compile(code, f"<cell {number}>", "exec"), namespace)
                untimed()
            except StepTimeout:
                ended = {"error": "timeout"}
            except BaseException as err:  # the student's cell failing is a result to report
                untimed()
                ended = _error(err)
            report({"event": "cell", "position": position, **ended})
        for name, fn_source in job["points"].get(position, []):
            if name in done:
                continue
            try:
                timed("exercise", name)
                try:
                    fn = eval(fn_source, namespace)
                    if not callable(fn):
                        raise TypeError(f"{fn_source} is not a function")
                except Exception as err:
                    untimed()
                    report({"event": "missing", "name": name, **_error(err)})
                    continue
                for k, args in enumerate(job["inputs"][name]):
                    header, payload = _result(fn, args, job.get("bans", {}).get(name, []))
                    report({"event": "case", "name": name, "k": k, **header}, payload)
                untimed()
                report({"event": "graded", "name": name})
            except StepTimeout:
                report({"event": "timeout", "name": name})
    untimed()
    report({"event": "end"})
    os._exit(0)  # no clean-up code of the student's objects runs after the report


if __name__ == "__main__":
    main()
