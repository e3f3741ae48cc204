"""An ordered map over forked worker processes, for the local in-process runner (Beam-free).

The local runner runs every DoFn in one Python process, so a converter uses one core plus
what Arrow and the codecs do with the GIL released. Beam's `multi_processing` mode starts a
fresh interpreter per worker, which imports Beam again: ~1.5 CPU-seconds each, as much as
a mid-size conversion takes on 2 cores. A fork costs milliseconds and the child has every
module imported already, so a converter given a `WorkUnitGroup` (see `transforms.records`)
converts its work units in forked children with `forked_map`.

`forked_map(fn, items, processes)` yields what `fn(items[0])` yields, then what
`fn(items[1])` yields, and so on, exactly as `for item in items: yield from fn(item)`
would, while up to `processes` children compute them:

* Children take items in order, the next one as soon as they finish one, so uneven items
  balance. Results come back in item order, so the output does not depend on timing.
* A child sends each result (pickled, over a pipe) as soon as `fn` yields it. Large
  buffers in it (numpy arrays, `FramedRecords` data) travel out of band (pickle protocol
  5): written to the pipe from where they are and read into their final place, never
  copied into or out of a pickle. Results of items ahead of the one being consumed wait
  in the parent, up to `max_buffered_bytes` per child; past that the parent stops reading
  that child, whose next write blocks. Memory stays bounded by that setting, not by the
  size of an item.
* An exception raised by `fn` is raised in the parent when its item's turn comes, after
  every result before it. A child that dies (killed, out of memory) raises `WorkerDiedError`
  naming the item.
* Closing the iterator early, or an exception in the consumer, kills and reaps the children.
* `receive_ahead=True` receives results on a background thread until the first `next()`, so
  the children keep working while the caller does something else first. Nothing is
  consumed meanwhile, so all children run ahead at once: they share the limit (each may
  have `max_buffered_bytes / processes` waiting), which keeps the parent's peak where a
  running map puts it, one child's limit. With `started_ahead`/`take_started`, a launcher
  starts a conversion before Beam builds and starts the pipeline, and the converter DoFn,
  a copy Beam deserialized in the same process, takes the running conversion over instead
  of starting its own.

POSIX fork only (Linux): elsewhere, with one process or one item, it is the plain chain.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import os
import pickle
import select
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "WorkerDiedError",
    "fork_available",
    "forked_map",
    "started_ahead",
    "take_started",
]

_LOG = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Results of not-yet-due items a child may have waiting in the parent. A chunk of 16,384
#: rows is 1.5-7 MB framed, so this lets a child run a few chunks ahead. Measured on the
#: benchmark data (2 children): as fast as 64 MiB, and the parent's memory stays flat from
#: 2M to 20M rows (64 MiB let it grow by ~50 MB, as children ran further ahead).
DEFAULT_MAX_BUFFERED_BYTES = 16 * 1024 * 1024

_PIPE_BYTES = 1024 * 1024
_MESSAGE = struct.Struct("<BQI")  # kind, pickle length, number of out-of-band buffers
_BUFFER_SIZE = struct.Struct("<Q")  # after the header: the length of each buffer
_TASK = struct.Struct("<q")  # item index; _NO_MORE_ITEMS tells the child to exit
_RESULT, _DONE, _ERROR, _DIED = 0, 1, 2, 3
_NO_MORE_ITEMS = -1


class WorkerDiedError(RuntimeError):
    """A forked worker ended without finishing its item (killed, out of memory, ...)."""


def fork_available() -> bool:
    """True where `forked_map` forks: Linux (fork without exec is unsafe on macOS)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def forked_map(fn: Callable[[T], Iterable[R]], items: Iterable[T], processes: int,
               max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES, *,
               receive_ahead: bool = False) -> Iterator[R]:
    """The results of `fn(item)` for every item, in order, computed on forked children.

    See the module docstring. `fn` and the items reach the children by fork, so they need
    not be picklable; the results and exceptions `fn` raises must be (an exception that is
    not is raised as a RuntimeError carrying its text). `receive_ahead`: receive results
    before the first `next()` (on a thread); no effect when it does not fork.
    """
    items = list(items)
    if processes <= 1 or len(items) <= 1 or not fork_available():
        return _in_process(fn, items)
    return _ForkedMap(fn, items, min(processes, len(items)), max_buffered_bytes, receive_ahead)


_started: dict[str, Iterator] = {}
_started_lock = threading.Lock()


@contextlib.contextmanager
def started_ahead(key: str, results: Iterator) -> Iterator[None]:
    """Within the block, `take_started(key)` returns `results`, once, to any caller in this
    process. Leaving the block closes `results` if nobody took them (stopping the children
    of a `forked_map`), so a run that fails before its consumer starts leaves none behind.
    """
    with _started_lock:
        refused = key in _started
        if not refused:
            _started[key] = results
    if refused:
        _close(results)
        raise ValueError(f"results are already started under the key {key!r}")
    try:
        yield
    finally:
        with _started_lock:
            untaken = _started.pop(key, None)
        if untaken is not None:
            _close(untaken)


def _close(results: Iterator) -> None:
    close = getattr(results, "close", None)
    if close is not None:
        close()


def take_started(key: str) -> Iterator | None:
    """The results started under `key` (see `started_ahead`), or None: not started, or taken."""
    with _started_lock:
        return _started.pop(key, None)


def _in_process(fn: Callable[[T], Iterable[R]], items: list[T]) -> Iterator[R]:
    for item in items:
        yield from fn(item)


def _widen(pipe_fd: int) -> None:
    """Grows a pipe from 64 KiB to 1 MiB where allowed: results are megabytes, and each
    64 KiB costs the parent a wake-up and a read."""
    try:
        import fcntl  # POSIX only, like fork

        fcntl.fcntl(pipe_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (AttributeError, OSError):  # not Linux, or above /proc/sys/fs/pipe-max-size
        pass


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
    def send(kind: int, payload: bytes, buffers: Sequence[pickle.PickleBuffer] = ()) -> None:
        raws = [buffer.raw() for buffer in buffers]
        head = [_MESSAGE.pack(kind, len(payload), len(raws))]
        head += [_BUFFER_SIZE.pack(raw.nbytes) for raw in raws]
        _write_all(result_fd, b"".join(head))
        for part in (payload, *raws):
            _write_all(result_fd, part)

    while True:
        task = _read_exact(task_fd, _TASK.size)
        index = _NO_MORE_ITEMS if task is None else _TASK.unpack(task)[0]
        if index == _NO_MORE_ITEMS:
            return
        try:
            for result in fn(items[index]):
                buffers: list[pickle.PickleBuffer] = []
                payload = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
                send(_RESULT, payload, buffers)
        except BaseException as error:  # noqa: BLE001 - re-raised in the parent when due
            send(_ERROR, _pickled_error(error))
            return
        send(_DONE, b"")


class _Child:
    """The parent's view of one forked worker."""

    __slots__ = ("pid", "task_fd", "result_fd", "assigned", "buffer", "buffered", "ended")

    def __init__(self, pid: int, task_fd: int, result_fd: int):
        self.pid = pid
        self.task_fd = task_fd
        self.result_fd = result_fd
        self.assigned: collections.deque[int] = collections.deque()  # items sent, not finished
        # Received messages: (kind, payload, out-of-band buffers).
        self.buffer: collections.deque[tuple[int, bytes | bytearray, list]] = collections.deque()
        self.buffered = 0  # bytes (payloads and buffers) in `buffer`
        self.ended = False  # its result pipe reached end of file


class _ForkedMap(Iterator):
    """The iterator `forked_map` returns when it forks."""

    def __init__(self, fn: Callable, items: list, processes: int, max_buffered_bytes: int,
                 receive_ahead: bool = False):
        self._ahead: threading.Thread | None = None  # receives before the first next()
        self._ahead_error: BaseException | None = None
        self._wake_fds: tuple[int, int] | None = None  # tells `_ahead` to stop
        self._items = items
        self._max_buffered = max(1, max_buffered_bytes)
        self._next_item = 0
        self._children: list[_Child] = []
        self._owner: dict[int, _Child] = {}
        self._pids: list[int] = []
        #: Largest total of results waiting in the parent (for tests and tuning).
        self.peak_buffered_bytes = 0
        try:
            for _ in range(processes):
                self._children.append(self._fork(fn))
                self._pids.append(self._children[-1].pid)
            for child in self._children:
                self._assign(child)
            if receive_ahead:
                self._wake_fds = os.pipe()  # after the forks: no child holds it
                self._ahead = threading.Thread(target=self._receive_ahead, daemon=True,
                                               name="forked-map-receive-ahead")
                self._ahead.start()
        except BaseException:
            self.close()
            raise
        self._results = self._generate()

    @property
    def pids(self) -> list[int]:
        """The children's process ids, as forked (for tests and logs)."""
        return list(self._pids)

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
                os._exit(code)
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

    def __next__(self):
        if self._ahead is not None:
            self._stop_receiving_ahead()
        return next(self._results)

    def _receive_ahead(self) -> None:
        """The `receive_ahead` thread: what `_take` does, for every child, until woken."""
        share = max(1, self._max_buffered // len(self._children))  # see the module docstring
        try:
            while self._receive_ready(
                    [c for c in self._children if not c.ended and c.buffered < share],
                    wake_fd=self._wake_fds[0]):
                pass
        except BaseException as error:  # noqa: BLE001 - raised by the next `next()`
            self._ahead_error = error

    def _stop_receiving_ahead(self, raise_error: bool = True) -> None:
        thread, self._ahead = self._ahead, None
        if thread is not None:
            os.write(self._wake_fds[1], b"\0")
            thread.join()
        if self._wake_fds is not None:
            for fd in self._wake_fds:
                os.close(fd)
            self._wake_fds = None
        error, self._ahead_error = self._ahead_error, None
        if error is not None and raise_error:
            raise error

    def close(self) -> None:
        """Stops the children (killing any still working) and reaps them."""
        results = getattr(self, "_results", None)
        if results is not None:
            results.close()
        self._shutdown()

    def __del__(self):
        self._shutdown()

    def _generate(self) -> Iterator:
        try:
            for index in range(len(self._items)):
                child = self._owner[index]
                while True:
                    kind, payload, buffers = self._take(child)
                    if kind == _RESULT:
                        yield pickle.loads(payload, buffers=buffers)
                    elif kind == _DONE:
                        break
                    elif kind == _ERROR:
                        error, text = pickle.loads(payload)
                        if hasattr(error, "add_note"):
                            error.add_note(f"raised in a forked converter process, on item "
                                           f"{self._items[index]!r}:\n{text}")
                        raise error
                    else:
                        raise WorkerDiedError(f"a converter process {payload.decode()} "
                                              f"while converting {self._items[index]!r}")
        finally:
            self._shutdown()

    def _take(self, child: _Child) -> tuple[int, bytes | bytearray, list]:
        """The next message of `child`, reading (and buffering) the children until it has one."""
        while not child.buffer:
            if child.ended:  # cannot happen: an ended child with work left reports _DIED
                raise WorkerDiedError("a converter process ended with nothing left to report")
            self._receive_ready([c for c in self._children if not c.ended
                                 and (c is child or c.buffered < self._max_buffered)])
        kind, payload, buffers = message = child.buffer.popleft()
        child.buffered -= len(payload) + sum(map(len, buffers))
        return message

    def _receive_ready(self, children: list[_Child], wake_fd: int | None = None) -> bool:
        """Waits until one of `children` has something to read, then receives one message
        from each that has; False, receiving nothing, when `wake_fd` became readable."""
        poller = select.poll()
        for fd in [c.result_fd for c in children] + ([] if wake_fd is None else [wake_fd]):
            poller.register(fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll()}
        if wake_fd in ready:
            return False
        for c in children:
            if c.result_fd in ready:
                self._receive(c)
        return True

    def _receive(self, child: _Child) -> None:
        header = _read_exact(child.result_fd, _MESSAGE.size)
        if header is None:
            child.ended = True
            status = self._reap(child)
            if child.assigned:  # it had work left: tell the consumer when that item is due
                child.buffer.append((_DIED, status.encode(), []))
            return
        kind, size, count = _MESSAGE.unpack(header)
        sizes = [n for (n,) in _BUFFER_SIZE.iter_unpack(self._read(child, _BUFFER_SIZE.size * count))]
        payload = self._read(child, size)
        buffers = [self._read(child, buffer_size) for buffer_size in sizes]
        child.buffer.append((kind, payload, buffers))
        child.buffered += size + sum(sizes)
        self.peak_buffered_bytes = max(self.peak_buffered_bytes,
                                       sum(c.buffered for c in self._children))
        if kind == _DONE:
            child.assigned.popleft()
            self._assign(child)
        elif kind == _ERROR:
            child.assigned.clear()

    @staticmethod
    def _read(child: _Child, size: int) -> bytes | bytearray:
        """The next `size` bytes of a message from `child` (its pipe must not end first)."""
        if not size:
            return b""
        data = _read_exact(child.result_fd, size)
        if data is None:
            raise EOFError("a converter process closed its pipe inside a message")
        return data

    @staticmethod
    def _reap(child: _Child) -> str:
        """Waits for an ended child; describes how it ended."""
        pid, child.pid = child.pid, 0
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            return f"(pid {pid}) was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"(pid {pid}) exited with status {os.WEXITSTATUS(status)}"

    def _shutdown(self) -> None:
        if getattr(self, "_wake_fds", None) is not None:
            self._stop_receiving_ahead(raise_error=False)
        for child in getattr(self, "_children", ()):
            for fd in (child.task_fd, child.result_fd):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            child.task_fd = child.result_fd = -1
            if child.pid:
                if child.assigned and not child.ended:
                    try:
                        os.kill(child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    _, status = os.waitpid(child.pid, 0)
                    if os.WIFEXITED(status) and os.WEXITSTATUS(status) and not child.assigned:
                        _LOG.warning("converter process %d exited with status %d after its "
                                     "last item", child.pid, os.WEXITSTATUS(status))
                except ChildProcessError:
                    pass
                child.pid = 0
