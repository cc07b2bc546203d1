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

import time
import uuid
from dataclasses import dataclass
from typing import Any

from firesteel.core import layout
from firesteel.core.errors import ConfigError, FiresteelError
from firesteel.core.folder import Folder

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


def _folder(checkpoint: str) -> Folder:
    return Folder(layout.control(checkpoint))


def _read(folder: Folder, name: str, kind: str) -> Any | None:
    try:
        return folder.read_record(name, kind, (VERSION,))
    except FileNotFoundError:
        return None


def pending_stop(checkpoint: str) -> StopRequest | None:
    """The stop request waiting at ``checkpoint`` (one small read), or None."""
    content = _read(_folder(checkpoint), "stop.json", REQUEST_KIND)
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
    body = {"id": request.id, "target": request.target, "requested_at": request.requested_at}
    _folder(checkpoint).write_record("stop.json", REQUEST_KIND, VERSION, body)
    return request


def take_stop(checkpoint: str, request: StopRequest) -> None:
    """Driver side: remove ``request`` once acted on, so a restart does not act on it again."""
    current = pending_stop(checkpoint)
    if current is not None and current.id == request.id:
        # The other side may have taken it in the meantime: a missing file is no error.
        _folder(checkpoint).delete("stop.json")


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
    body = {
        "id": answer.id,
        "savepoint": answer.savepoint,
        "batch": answer.batch,
        "error": answer.error,
        "answered_at": answer.answered_at,
    }
    _folder(checkpoint).write_record(_answer(request), ANSWER_KIND, VERSION, body)
    return answer


def _answer(request: StopRequest) -> str:
    return f"stop-{request.id}.answer.json"


def wait_for_answer(checkpoint: str, request: StopRequest, timeout_seconds: float) -> StopAnswer:
    """The answer to ``request``; after ``timeout_seconds`` without one, the request is
    withdrawn (unless the driver took it meanwhile) and :class:`ControlTimeoutError` names
    what was waited for."""
    folder = _folder(checkpoint)
    path = folder.uri_of(_answer(request))
    deadline = time.monotonic() + timeout_seconds
    while True:
        content = _read(folder, _answer(request), ANSWER_KIND)
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
