"""The CLI's shared machinery: global options, output rendering, and the one error map.

Every command parses its arguments, calls one function, and hands the result
to `Ctx.emit`: with --json that prints one object `{"ok": true, ...}`;
otherwise the command's text. Every MnemologError, and every click usage
error, is turned into output and an exit code here and nowhere else.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mnemolog.eventlog.errors import BadInput, MnemologError, StorageError, UsageError

if TYPE_CHECKING:
    from mnemolog.substrate.home import Home

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Ctx:
    home_arg: str | None
    json: bool
    #: `--tenant NAME` (with `--tenants ROOT`): the home is that tenant's.
    tenant: str | None = None
    tenants_root: str | None = None

    @property
    def home(self) -> Home:
        # Imported here: the home pulls in the log, keys and pydantic, which --help never needs.
        from mnemolog.substrate.home import Home

        if self.tenant is not None:
            from pathlib import Path

            from mnemolog.substrate.tenancy.tenants import TenantRoot

            if self.home_arg is not None:
                raise UsageError("give --home or --tenant, not both")
            if not self.tenants_root:
                raise UsageError("--tenant needs the tenant root: --tenants ROOT or $MNEMOLOG_TENANTS")
            return Home(TenantRoot(Path(self.tenants_root)).require().home(self.tenant).root)
        return Home.resolve(self.home_arg)

    def emit(self, data: dict[str, Any], text: str | Callable[[], str] | None = None) -> None:
        if self.json:
            click.echo(json.dumps({"ok": True, **data}, sort_keys=False, default=str))
            return
        out = text() if callable(text) else text
        if out:
            click.echo(out)

    def info(self, message: str) -> None:
        """A diagnostic for a person: stderr, never mixed into data on stdout."""
        click.echo(message, err=True)


def json_option(f: F) -> F:
    """`--json` on every command as well as on the group."""

    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.find_object(Ctx).json = True  # type: ignore[union-attr]

    return click.option(
        "--json",
        "json_flag",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=callback,
        help="Print one JSON object.",
    )(f)


def render_error(err: MnemologError, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(err.to_json(), default=str))
        return
    click.echo(f"mnemolog: {err.message}", err=True)
    check = err.details.get("check")
    if check:
        parts = [f"check={check}"]
        for k in ("seq", "file", "expected", "found"):
            if k in err.details:
                parts.append(f"{k}={err.details[k]}")
        click.echo("  " + " ".join(parts), err=True)


def _wants_json(args: Sequence[str]) -> bool:
    return "--json" in args


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INTERNAL_ERROR_EXIT = 70
DEBUG_ENV = "MNEMOLOG_DEBUG"


def bound_integers(command: click.Command) -> None:
    """Give every integer option and argument of `command` (and its subcommands) 64-bit bounds.

    An integer beyond them is no seq, size, offset or count anything could
    hold: it is a usage error (64) at parse time rather than an overflow deep
    in the database or the codec.
    """
    for param in command.params:
        t = param.type
        if isinstance(t, click.IntRange):
            if t.min is None or t.max is None:
                param.type = click.IntRange(
                    INT64_MIN if t.min is None else t.min,
                    INT64_MAX if t.max is None else t.max,
                    min_open=t.min_open,
                    max_open=t.max_open,
                    clamp=t.clamp,
                )
        elif t is click.INT:
            param.type = click.IntRange(INT64_MIN, INT64_MAX)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            bound_integers(sub)


def check_argv(argv: Sequence[str]) -> None:
    """Refuse arguments that are not valid UTF-8 (exit 65) before any command runs.

    Python hands undecodable argv bytes over as lone surrogates; no text field,
    query, id or path mnemolog stores or prints can hold one.
    """
    for index, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = arg.encode("utf-8", "surrogateescape") if "\udc80" <= arg[exc.start] <= "\udcff" else None
            shown = raw.decode("utf-8", "backslashreplace") if raw is not None else ascii(arg)
            raise BadInput(
                f"argument {index} ({shown}) is not valid UTF-8 text",
                field=f"argv[{index}]",
                expected="UTF-8",
                found=ascii(arg)[:200],
            ) from None


def _internal_error(exc: BaseException, as_json: bool) -> None:
    """The last resort: a bug, reported without a traceback unless MNEMOLOG_DEBUG is set."""
    if os.environ.get(DEBUG_ENV):
        traceback.print_exception(exc, file=sys.stderr)
    message = "internal error (please report)"
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": False,
                    "error": "internal_error",
                    "message": message,
                    "exit_code": INTERNAL_ERROR_EXIT,
                    "details": {"type": type(exc).__name__, "debug": f"set {DEBUG_ENV}=1 for a traceback"},
                }
            )
        )
    click.echo(f"mnemolog: {message}: {type(exc).__name__} (set {DEBUG_ENV}=1 for a traceback)", err=True)


def _os_error(exc: OSError) -> MnemologError:
    """An I/O failure nothing below caught: a storage error (exit 6) naming the path."""
    where = exc.filename if exc.filename is not None else None
    reason = exc.strerror or type(exc).__name__
    message = f"storage error: {reason}" + (f": {where}" if where is not None else "")
    return StorageError(message, file=None if where is None else str(where), errno=exc.errno)


NO_SUCH_COMMAND = re.compile(r"No such command '(.*?)'\.")


def with_suggestion(e: click.ClickException) -> str:
    """The error's message; for a mistyped subcommand of any group, with the nearest names."""
    message = e.format_message()
    m = NO_SUCH_COMMAND.match(message)
    ctx = getattr(e, "ctx", None)
    if m is None or ctx is None or not isinstance(ctx.command, click.Group):
        return message
    # click may add its own, looser "(Did you mean one of: ...)"; ours replaces it.
    message = m.group(0)
    typed = m.group(1)
    names = [n for n in ctx.command.list_commands(ctx) if n not in ("help",)]
    near = difflib.get_close_matches(typed, names, n=3, cutoff=0.7)
    if not near and len(typed) >= 3:
        near = sorted(n for n in names if n.startswith(typed[:3]))[:3]
    if not near:
        return message
    return f"{message} Did you mean {' or '.join(repr(n) for n in near)}?"


class MnemologGroup(click.Group):
    """Maps every error to its exit code, for this group and all subcommands."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = _wants_json(argv)
        try:
            return self._main(argv, prog_name, **extra)
        except SystemExit:
            raise
        except BrokenPipeError:
            # The reader went away (`mnemolog log show | head`): nothing left to say to it.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            if os.environ.get(DEBUG_ENV):
                traceback.print_exception(exc, file=sys.stderr)
            err = _os_error(exc)
            render_error(err, as_json)
            sys.exit(err.exit_code)
        except Exception as exc:
            _internal_error(exc, as_json)
            sys.exit(INTERNAL_ERROR_EXIT)

    def _main(self, argv: list[str], prog_name: str | None, **extra: Any) -> Any:
        # Nothing this program creates (log, keys, projections, checkpoints) is for other
        # users to read or write, whatever umask it was started with.
        os.umask(os.umask(0o077) | 0o077)
        bound_integers(self)
        try:
            check_argv(argv)
            rv = super().main(args=argv, prog_name=prog_name, standalone_mode=False, **extra)
        except MnemologError as err:
            render_error(err, _wants_json(argv))
            sys.exit(err.exit_code)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("mnemolog: aborted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            usage = UsageError(with_suggestion(e))
            if _wants_json(argv):
                render_error(usage, True)
            else:
                if isinstance(e, click.UsageError) and e.ctx is not None:
                    click.echo(e.ctx.get_usage(), err=True)
                click.echo(f"mnemolog: {usage.message}", err=True)
            sys.exit(usage.exit_code)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv


@contextmanager
def writer_for(ctx: Ctx, **kw: Any) -> Iterator[Any]:
    """Open the home's log writer, report any torn tail it cut on open, close it."""
    home = ctx.home
    w = home.open_writer(**kw)
    try:
        for line in home.recovered_keys:
            ctx.info(f"mnemolog: key recovery: {line}")
        for t in w.recovered:
            ctx.info(f"mnemolog: recovery: {t.describe()}")
        yield w
    finally:
        w.close()
        for message in w.take_warnings():
            ctx.info(f"mnemolog: warning: {message}")


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    if len(text) > 1024 * 1024:
        raise BadInput(f"{what}: larger than 1 MiB", field=what)
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise BadInput(
            f"{what} nests {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted",
            field=what,
            expected=f"<= {MAX_JSON_DEPTH}",
            found=depth,
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}", field=what) from exc
    if not isinstance(value, dict):
        raise BadInput(f"{what} must be a JSON object, found {type(value).__name__}", field=what)
    return value


#: Deeper JSON is refused before it is parsed: the parser recurses once per level.
MAX_JSON_DEPTH = 64


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (strings skipped), without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest
