"""The MCP server's stdio transport: one JSON-RPC message per line, read with a bound.

The SDK's own stdio transport reads whole lines of any length and drops a
line it cannot parse without answering it. A memory server must instead
answer every line and keep serving whatever arrives, so this transport
(built from the SDK's stream types, feeding the SDK's server loop):

  * reads at most MAX_LINE bytes of a line (the rest of an oversized line is
    skipped in chunks, never held), and answers it with INVALID_REQUEST;
  * decodes strictly as UTF-8 (a `\\xff` is a parse error, not a crash under
    any locale: the bytes never pass through the platform's text layer);
  * parses with pydantic's JSON parser, whose recursion limit turns 100,000
    nested brackets into a parse error, not a RecursionError;
  * answers an unparseable line with PARSE_ERROR and a well-formed line that
    is not a JSON-RPC message with INVALID_REQUEST, echoing the request's id
    only when it is a valid id (so `1e400` can never come back as
    `Infinity`, which is not JSON).

While serving, fd 0 reads the null device and fd 1 writes to stderr, so a
hook or library that prints cannot corrupt the wire; both are restored after.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
import pydantic_core
from mcp.shared._context_streams import ContextReceiveStream, ContextSendStream, create_context_streams
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

MAX_LINE = 4 * 1024 * 1024
_DRAIN_CHUNK = 64 * 1024


def read_line(stream: BinaryIO, limit: int = MAX_LINE) -> tuple[bytes | None, bool]:
    """(line without its newline, too_long); (None, False) at end of input.

    Holds at most `limit` + 1 bytes of a line whatever its length.
    """
    line = stream.readline(limit + 1)
    if not line:
        return None, False
    if line.endswith(b"\n"):
        return line[:-1], False
    if len(line) <= limit:
        return line, False  # the last line, without a newline
    while True:  # skip the rest of an oversized line
        more = stream.readline(_DRAIN_CHUNK)
        if not more or more.endswith(b"\n"):
            return b"", True


def _valid_id(value: Any) -> int | str | None:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _error(mid: int | str | None, code: int, message: str) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCError(jsonrpc="2.0", id=mid, error=types.ErrorData(code=code, message=message))
    )


def parse_line(raw: bytes) -> SessionMessage:
    """A message for the server, or the error response a bad line gets (a JSONRPCError)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(None, types.PARSE_ERROR, f"parse error: not UTF-8 (byte {exc.start})")
    try:
        value = pydantic_core.from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        return _error(None, types.PARSE_ERROR, f"parse error: {str(exc)[:200]}")
    if not isinstance(value, dict):
        return _error(None, types.INVALID_REQUEST, "invalid request: a message is a JSON object")
    mid = _valid_id(value.get("id"))
    if "id" in value and mid is None and value["id"] is not None:
        # Not a notification with a stray member: a request whose id cannot be echoed
        # (a float such as 1e400, which parses as infinity, a bool, an object).
        return _error(None, types.INVALID_REQUEST, "invalid request: id must be an integer or a string")
    try:
        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        return _error(mid, types.INVALID_REQUEST, f"invalid request: {where}: {first.get('msg')}")
    return SessionMessage(message)


def _is_error(m: SessionMessage) -> bool:
    return isinstance(m.message, types.JSONRPCError)


@asynccontextmanager
async def _claim_std_streams() -> AsyncIterator[tuple[BinaryIO, BinaryIO]]:
    """The wire's stdin and stdout, on private descriptors; fd 0 and 1 diverted meanwhile."""
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        sys.stdout.flush()
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        with os.fdopen(wire_in, "rb", buffering=64 * 1024) as fin, os.fdopen(wire_out, "wb") as fout:
            yield fin, fout
    finally:
        with suppress(OSError):
            sys.stdout.flush()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out, devnull):
            os.close(fd)


@asynccontextmanager
async def bounded_stdio(
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, limit: int = MAX_LINE
) -> AsyncIterator[
    tuple[ContextReceiveStream[SessionMessage | Exception], ContextSendStream[SessionMessage]]
]:
    """(read stream, write stream) for `Server.run`, over the process's stdio or the given files."""
    if stdin is None or stdout is None:
        async with _claim_std_streams() as (fin, fout), bounded_stdio(fin, fout, limit) as streams:
            yield streams
        return
    fin, fout = stdin, stdout
    read_send, read_recv = create_context_streams[SessionMessage | Exception](0)
    write_send, write_recv = create_context_streams[SessionMessage](0)
    # Errors for bad lines go out through their own queue, so the reader never
    # depends on the server's write stream (which the server closes when it ends).
    err_send, err_recv = create_context_streams[SessionMessage](16)
    lock = anyio.Lock()

    async def emit(m: SessionMessage) -> None:
        data = m.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        async with lock:
            await anyio.to_thread.run_sync(_write, fout, data)

    async def reader() -> None:
        async with read_send, err_send:
            while True:
                raw, too_long = await anyio.to_thread.run_sync(read_line, fin, limit, abandon_on_cancel=True)
                if raw is None:
                    return
                if too_long:
                    await err_send.send(
                        _error(None, types.INVALID_REQUEST, f"invalid request: larger than {limit} bytes")
                    )
                    continue
                if not raw.strip():
                    continue
                m = parse_line(raw)
                await (err_send if _is_error(m) else read_send).send(m)

    drained = [anyio.Event(), anyio.Event()]

    async def writer(recv: ContextReceiveStream[SessionMessage], done: anyio.Event) -> None:
        try:
            async with recv:
                async for m in recv:
                    await emit(m)
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer, write_recv, drained[0])
        tg.start_soon(writer, err_recv, drained[1])
        try:
            yield read_recv, write_send
        finally:
            # Let the last answers out before stopping the reader (which may be
            # blocked reading a client that keeps its end open).
            write_send.close()
            with anyio.move_on_after(5):
                await drained[0].wait()
            with anyio.move_on_after(0.5):
                await drained[1].wait()
            tg.cancel_scope.cancel()


def _write(f: BinaryIO, data: bytes) -> None:
    try:
        f.write(data)
        f.flush()
    except (BrokenPipeError, ValueError):
        pass  # the client went away; the reader sees end of input next
