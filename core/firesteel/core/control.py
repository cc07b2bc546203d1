"""Requests to a running query from another process, through files beside its checkpoint.

Flink's ``stop --savepointPath`` goes through the JobManager's REST API; a Spark
driver has no such endpoint, but it can read the query's checkpoint. So a request is a
record ``<checkpoint>/firesteel/control/stop.json`` (written whole with an atomic
put, carrying a request id and the savepoint's target), which the driver's listener
(:mod:`firesteel.backends.control`) reads after each batch and removes once it takes
the request. Its answer is the record ``control/stop-<request id>.answer.json``, which
:func:`wait_for_answer` polls for. One request at a time per query: a second one while
one is pending is refused, and a request nobody answered is withdrawn by the process
that made it when it gives up waiting, so a query started later does not stop on it.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from firesteel.core.checkpoint import FIRESTEEL_DIR, filesystem
from firesteel.core.durable import decode_record, encode_record, write_atomically
from firesteel.core.errors import ConfigError, FiresteelError

__all__ = [
    "ControlTimeoutError",
    "StopAnswer",
    "StopFailedError",
    "StopRequest",
    "answer_stop",
    "pending_stop",
    "request_stop",
    "take_stop",
    "wait_for_answer",
    "withdraw_stop",
]

CONTROL_DIR = f"{FIRESTEEL_DIR}/control"
REQUEST_KIND = "stop-request"
ANSWER_KIND = "stop-answer"
VERSION = 1
_POLL_SECONDS = 0.2


class ControlTimeoutError(FiresteelError, TimeoutError):
    """No answer came to a request in the time given."""


class StopFailedError(FiresteelError):
    """The driver answered a stop request without a savepoint (its answer says why)."""


@dataclass(frozen=True)
class StopRequest:
    """Stop the query after its running batch and write a savepoint to ``target``."""

    id: str
    target: str
    requested_at: float


@dataclass(frozen=True)
class StopAnswer:
    """What the driver did with a :class:`StopRequest`: ``batch`` is the savepoint's
    (the last committed batch); ``error`` says why none was taken."""

    id: str
    savepoint: str | None
    batch: int | None
    error: str | None
    answered_at: float


def _paths(checkpoint: str) -> tuple[Any, str]:
    fsys, base = filesystem(checkpoint)
    return fsys, f"{base}/{CONTROL_DIR}"


def _read(fsys: Any, path: str, kind: str) -> Any | None:
    try:
        with fsys.open_input_stream(path) as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    return decode_record(data, path, kind, (VERSION,))


def pending_stop(checkpoint: str) -> StopRequest | None:
    """The stop request waiting at ``checkpoint`` (one small read), or None."""
    fsys, folder = _paths(checkpoint)
    content = _read(fsys, f"{folder}/stop.json", REQUEST_KIND)
    return StopRequest(**content) if content is not None else None


def request_stop(checkpoint: str, target: str) -> StopRequest:
    """Ask the query of ``checkpoint`` to stop with a savepoint at ``target``.

    Refused (:class:`~firesteel.core.errors.ConfigError`) while another request waits.
    """
    waiting = pending_stop(checkpoint)
    if waiting is not None:
        msg = (
            f"{checkpoint}: stop request {waiting.id} (savepoint to {waiting.target}) is "
            "still waiting for the query; wait for it or withdraw it first"
        )
        raise ConfigError(msg)
    request = StopRequest(id=uuid.uuid4().hex, target=target, requested_at=time.time())
    fsys, folder = _paths(checkpoint)
    fsys.create_dir(folder, recursive=True)
    body = {"id": request.id, "target": request.target, "requested_at": request.requested_at}
    write_atomically(fsys, f"{folder}/stop.json", encode_record(REQUEST_KIND, VERSION, body))
    return request


def take_stop(checkpoint: str, request: StopRequest) -> None:
    """Driver side: remove ``request`` once acted on, so a restart does not act on it again."""
    fsys, folder = _paths(checkpoint)
    current = pending_stop(checkpoint)
    if current is not None and current.id == request.id:
        # The other side may have taken it in the meantime.
        with contextlib.suppress(FileNotFoundError):
            fsys.delete_file(f"{folder}/stop.json")


withdraw_stop = take_stop
"""Requester side: remove a request nobody answered (same rule as :func:`take_stop`)."""


def answer_stop(
    checkpoint: str,
    request: StopRequest,
    *,
    batch: int | None = None,
    error: str | None = None,
) -> StopAnswer:
    """Driver side: record what became of ``request``."""
    answer = StopAnswer(
        id=request.id,
        savepoint=None if error else request.target,
        batch=batch,
        error=error,
        answered_at=time.time(),
    )
    fsys, folder = _paths(checkpoint)
    fsys.create_dir(folder, recursive=True)
    body = {
        "id": answer.id,
        "savepoint": answer.savepoint,
        "batch": answer.batch,
        "error": answer.error,
        "answered_at": answer.answered_at,
    }
    path = f"{folder}/stop-{request.id}.answer.json"
    write_atomically(fsys, path, encode_record(ANSWER_KIND, VERSION, body))
    return answer


def wait_for_answer(checkpoint: str, request: StopRequest, timeout_seconds: float) -> StopAnswer:
    """The answer to ``request``; after ``timeout_seconds`` without one, the request is
    withdrawn (unless the driver took it meanwhile) and :class:`ControlTimeoutError` names
    what was waited for."""
    fsys, folder = _paths(checkpoint)
    path = f"{folder}/stop-{request.id}.answer.json"
    deadline = time.monotonic() + timeout_seconds
    while True:
        content = _read(fsys, path, ANSWER_KIND)
        if content is not None:
            return StopAnswer(**content)
        if time.monotonic() > deadline:
            taken = pending_stop(checkpoint) is None
            if not taken:
                withdraw_stop(checkpoint, request)
            state = (
                "the driver took the request but has not answered (a batch or the savepoint "
                "is still running; the answer will appear at that path)"
                if taken
                else "no driver took the request (withdrawn): is the query running, with a "
                "firesteel stateful operator, in a classic Spark session?"
            )
            msg = (
                f"no answer to stop request {request.id} at {path} after "
                f"{timeout_seconds:.0f} s: {state}"
            )
            raise ControlTimeoutError(msg)
        time.sleep(_POLL_SECONDS)
