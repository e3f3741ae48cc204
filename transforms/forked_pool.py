"""An ordered, bounded map over forked worker processes, for the local in-process runner.

The local runner runs every DoFn in one Python process, so a converter gets one core plus
what Arrow and the codecs do with the GIL released. A fork costs milliseconds and the child
has every module imported already, so the local runner converts its work units in forked
children (`pipeline.graph.ConvertOnForkedProcesses`).

`forked_map(fn, items, processes)` yields exactly what `for item in items: yield from fn(item)`
would, while up to `processes` children compute it:

* Children take the next item as soon as they finish one, so uneven items balance; results
  come back in item order, so the output does not depend on timing.
* A child sends each result, pickled, over its pipe as soon as `fn` yields it. Results of
  items ahead of the one being consumed wait in the parent, up to `max_buffered_bytes` per
  child; past that the parent stops reading that child, whose next write blocks. Memory
  stays bounded by that setting, not by the size of an item.
* An exception raised by `fn` is raised in the parent when its item's turn comes, after
  every result before it; a child that dies (killed, out of memory) raises `WorkerDiedError`
  naming the item. Closing the iterator early, or an exception in the consumer, kills and
  reaps the children.

POSIX fork only (Linux): elsewhere, with one process or one item, it is the plain chain.
Beam-free.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import logging
import os
import pickle
import select
import signal
import struct
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_MAX_BUFFERED_BYTES", "WorkerDiedError", "fork_available", "forked_map"]

_LOG = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Results of not-yet-due items a child may have waiting in the parent. A chunk of 16,384
#: rows is 1.5-7 MB framed, so this lets a child run a few chunks ahead; the parent's memory
#: stays flat as the input grows.
DEFAULT_MAX_BUFFERED_BYTES = 16 * 1024 * 1024

_PIPE_BYTES = 1024 * 1024
_MESSAGE = struct.Struct("<BQ")  # kind, payload length
_TASK = struct.Struct("<q")  # item index; _NO_MORE_ITEMS tells the child to exit
_RESULT, _DONE, _ERROR, _DIED = 0, 1, 2, 3
_NO_MORE_ITEMS = -1


class WorkerDiedError(RuntimeError):
    """A forked worker ended without finishing its item (killed, out of memory, ...)."""


def fork_available() -> bool:
    """True where `forked_map` forks: Linux (fork without exec is unsafe on macOS)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def forked_map(fn: Callable[[T], Iterable[R]], items: Iterable[T], processes: int,
               max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES) -> Iterator[R]:
    """The results of `fn(item)` for every item, in order, computed on forked children. `fn`
    and the items reach the children by fork, so they need not be picklable; the results and
    exceptions `fn` raises must be (an exception that is not is raised as a RuntimeError
    carrying its text)."""
    items = list(items)
    if processes > 1 and len(items) > 1 and fork_available():
        yield from _ForkedMap(items, max_buffered_bytes).results(fn, min(processes, len(items)))
    else:
        for item in items:
            yield from fn(item)


def _widen(pipe_fd: int) -> None:
    """Grows a pipe from 64 KiB to 1 MiB where allowed: results are megabytes, and each
    64 KiB costs the parent a wake-up and a read."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or above /proc/sys/fs/pipe-max-size
        import fcntl  # POSIX only, like fork

        fcntl.fcntl(pipe_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytearray | None:
    """`size` bytes from `fd`, or None at end of file before the first byte."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        count = os.readv(fd, [view[got:]])
        if count == 0:
            if got == 0:
                return None
            raise EOFError(f"pipe closed after {got} of {size} bytes")
        got += count
    return buffer


def _pickled_error(error: BaseException) -> bytes:
    text = "".join(traceback.format_exception(error))
    try:
        payload = pickle.dumps((error, text), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)  # some exceptions pickle but cannot be rebuilt
        return payload
    except Exception:  # noqa: BLE001 - fall back to the text
        stand_in = RuntimeError(f"{type(error).__name__}: {error}")
        return pickle.dumps((stand_in, text), protocol=pickle.HIGHEST_PROTOCOL)


def _child_main(fn: Callable, items: Sequence, task_fd: int, result_fd: int) -> None:
    def send(kind: int, payload: bytes) -> None:
        _write_all(result_fd, _MESSAGE.pack(kind, len(payload)))
        _write_all(result_fd, payload)

    while True:
        task = _read_exact(task_fd, _TASK.size)
        index = _NO_MORE_ITEMS if task is None else _TASK.unpack(task)[0]
        if index == _NO_MORE_ITEMS:
            return
        try:
            for result in fn(items[index]):
                send(_RESULT, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        except BaseException as error:  # noqa: BLE001 - re-raised in the parent when due
            send(_ERROR, _pickled_error(error))
            return
        send(_DONE, b"")


@dataclasses.dataclass(slots=True)
class _Child:
    """The parent's view of one forked worker."""

    pid: int
    task_fd: int
    result_fd: int
    assigned: collections.deque[int] = dataclasses.field(default_factory=collections.deque)  # not done
    buffer: collections.deque[tuple[int, bytes | bytearray]] = dataclasses.field(
        default_factory=collections.deque)
    buffered: int = 0  # payload bytes in `buffer`
    ended: bool = False  # its result pipe reached end of file


class _ForkedMap:
    """The children `forked_map` forks, and the parent's side of their pipes."""

    def __init__(self, items: list, max_buffered_bytes: int):
        self._items = items
        self._max_buffered = max(1, max_buffered_bytes)
        self._next_item = 0
        self._children: list[_Child] = []
        self._owner: dict[int, _Child] = {}

    def _fork(self, fn: Callable) -> _Child:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        _widen(result_write)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                gc.freeze()  # the collector would otherwise touch (and copy) shared pages
                for child in self._children:  # the parent's ends of earlier children's pipes
                    os.close(child.task_fd)
                    os.close(child.result_fd)
                os.close(task_write)
                os.close(result_read)
                _child_main(fn, self._items, task_read, result_write)
            except BaseException:  # noqa: BLE001 - e.g. the parent went away (broken pipe)
                code = 1
            finally:
                os._exit(code)  # a forked child must not run the parent's exit handlers
        os.close(task_read)
        os.close(result_write)
        return _Child(pid, task_write, result_read)

    def _assign(self, child: _Child) -> None:
        if self._next_item < len(self._items):
            index, self._next_item = self._next_item, self._next_item + 1
            child.assigned.append(index)
            self._owner[index] = child
            _write_all(child.task_fd, _TASK.pack(index))
        else:
            _write_all(child.task_fd, _TASK.pack(_NO_MORE_ITEMS))

    def results(self, fn: Callable, processes: int) -> Iterator:
        """The results in item order. Closing the generator (or its end, or its garbage
        collection) kills the children still working and reaps them all."""
        try:
            for _ in range(processes):
                self._children.append(self._fork(fn))
            for child in self._children:
                self._assign(child)
            for index in range(len(self._items)):
                child = self._owner[index]
                while True:
                    kind, payload = self._take(child)
                    if kind == _RESULT:
                        yield pickle.loads(payload)
                    elif kind == _DONE:
                        break
                    elif kind == _ERROR:
                        error, text = pickle.loads(payload)
                        if hasattr(error, "add_note"):  # ends on the cause, which Beam's
                            # step annotation takes from the last line
                            error.add_note(f"raised in a forked converter process, on item "
                                           f"{self._items[index]!r}:\n{text.rstrip()}")
                        raise error
                    else:
                        raise WorkerDiedError(f"a converter process {payload.decode()} "
                                              f"while converting {self._items[index]!r}")
        finally:
            self._shutdown()

    def _take(self, child: _Child) -> tuple[int, bytes | bytearray]:
        """The next message of `child`, reading (and buffering) the children until it has one."""
        while not child.buffer:
            if child.ended:  # cannot happen: an ended child with work left reports _DIED
                raise WorkerDiedError("a converter process ended with nothing left to report")
            readable = [c for c in self._children
                        if not c.ended and (c is child or c.buffered < self._max_buffered)]
            poller = select.poll()
            for c in readable:
                poller.register(c.result_fd, select.POLLIN)
            ready = {fd for fd, _ in poller.poll()}
            for c in readable:
                if c.result_fd in ready:
                    self._receive(c)
        kind, payload = child.buffer.popleft()
        child.buffered -= len(payload)
        return kind, payload

    def _receive(self, child: _Child) -> None:
        header = _read_exact(child.result_fd, _MESSAGE.size)
        if header is None:
            child.ended = True
            status = self._reap(child)
            if child.assigned:  # it had work left: tell the consumer when that item is due
                child.buffer.append((_DIED, status.encode()))
            return
        kind, size = _MESSAGE.unpack(header)
        payload = _read_exact(child.result_fd, size) if size else b""
        if payload is None:
            raise EOFError("a converter process closed its pipe inside a message")
        child.buffer.append((kind, payload))
        child.buffered += size
        if kind == _DONE:
            child.assigned.popleft()
            self._assign(child)
        elif kind == _ERROR:
            child.assigned.clear()

    @staticmethod
    def _reap(child: _Child) -> str:
        """Waits for an ended child; describes how it ended."""
        pid, child.pid = child.pid, 0
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            return f"(pid {pid}) was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"(pid {pid}) exited with status {os.WEXITSTATUS(status)}"

    def _shutdown(self) -> None:
        for child in self._children:
            for fd in (child.task_fd, child.result_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            child.task_fd = child.result_fd = -1
            if child.pid:
                if child.assigned and not child.ended:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    _, status = os.waitpid(child.pid, 0)
                    if os.WIFEXITED(status) and os.WEXITSTATUS(status) and not child.assigned:
                        _LOG.warning("converter process %d exited with status %d after its "
                                     "last item", child.pid, os.WEXITSTATUS(status))
                child.pid = 0
