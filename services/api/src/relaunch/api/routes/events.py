"""GET /v1/events/stream: server-sent events from the EVENTS stream (domain/streaming.py has the format)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ..adapters.events import EventsUnavailable, StreamClosed
from ..auth import evidence_withheld
from ..domain import streaming
from ..metrics import EVENT_STREAMS

router = APIRouter(prefix="/v1", tags=["events"])


@router.get("/events/stream", summary="Live events (text/event-stream) from the EVENTS stream",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}},
                       400: {"description": "a subject filter outside the EVENTS stream"},
                       503: {"description": "NATS unavailable, or too many live streams"}})
async def stream(request: Request,
                 subject: Annotated[str, Query(description="NATS subject filter within relaunch.event.>")]
                 = streaming.DEFAULT_FILTER,
                 since: Annotated[dt.datetime | None, Query(
                     description="Start at this time (ISO 8601) instead of now; the stream keeps 30 days.")] = None,
                 last_event_id: Annotated[str | None, Header(
                     description="Sent by EventSource on reconnect: resume right after this sequence.")] = None,
                 ) -> StreamingResponse:
    try:
        streaming.check_filter(subject)
    except streaming.FilterError as exc:
        raise HTTPException(400, detail=str(exc)) from exc
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)  # a time without zone is read as UTC, as the ledger stores it
    state = request.app.state
    # The slot is taken here, before the first await: the check and the count are one step of the
    # event loop, so concurrent opens cannot all pass the check (issue 35: counting after the
    # subscribe's await let 200 concurrent opens through a cap of 64). Every path out gives it back.
    if state.open_streams >= state.settings.event_streams_max:
        raise HTTPException(503, detail=f"{state.open_streams} live event streams are open, the most this API "
                                        "serves (RELAUNCH_API_EVENT_STREAMS_MAX); close one or poll /v1/jobs")
    state.open_streams += 1
    EVENT_STREAMS.inc()
    released = False

    def give_back_slot() -> None:
        # Guarded: it runs from the generator's finally, from the response's background task, and
        # when the subscribe fails; the count must drop once.
        nonlocal released
        if not released:
            released = True
            state.open_streams -= 1
            EVENT_STREAMS.dec()

    # Without the token (where one is configured) anomalies arrive without their log lines.
    withheld = evidence_withheld(request)
    try:
        sub = await state.backends.events.subscribe(
            subject, since=since, after_seq=streaming.parse_last_event_id(last_event_id))
    except EventsUnavailable as exc:
        give_back_slot()
        raise HTTPException(503, detail=str(exc)) from exc
    except BaseException:
        give_back_slot()  # cancelled (the client left) or failed: the slot is not kept
        raise
    heartbeat = state.settings.event_heartbeat_s

    async def release() -> None:
        # Runs from the generator's finally and again as the response's background task: a client
        # that vanishes before the first byte never starts the generator, and a cancelled finally
        # may not finish its await. Counting is guarded; closing is idempotent.
        give_back_slot()
        await sub.close()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield streaming.preamble()
            while True:
                try:
                    event = await sub.next(timeout=heartbeat)
                except StreamClosed:
                    return  # the browser reconnects after `retry` and resumes from Last-Event-ID
                if event is None:
                    # Quiet: a comment keeps proxies from closing an idle connection. (A client
                    # that left is noticed by Starlette, which cancels this generator.)
                    yield streaming.HEARTBEAT
                    continue
                yield streaming.frame(event.seq, event.subject, event.data, event.at, withheld=withheld)
        finally:
            await release()

    return StreamingResponse(frames(), media_type="text/event-stream", background=BackgroundTask(release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
