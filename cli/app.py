"""The CLI's shared machinery: global options, output rendering, and the one error map.

Every command parses its arguments, calls one function, and hands the result
to `Ctx.emit`: with --json that prints one object `{"ok": true, ...}`;
otherwise the command's text. Every MnemologError, and every click usage
error, is turned into output and an exit code here and nowhere else.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mnemolog.eventlog.errors import MnemologError, UsageError

if TYPE_CHECKING:
    from mnemolog.substrate.home import Home

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Ctx:
    home_arg: str | None
    json: bool

    @property
    def home(self) -> Home:
        # Imported here: the home pulls in the log, keys and pydantic, which --help never needs.
        from mnemolog.substrate.home import Home

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


class MnemologGroup(click.Group):
    """Maps every error to its exit code, for this group and all subcommands."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
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
            usage = UsageError(e.format_message())
            if _wants_json(argv):
                render_error(usage, True)
            else:
                if isinstance(e, click.UsageError) and e.ctx is not None:
                    click.echo(e.ctx.get_usage(), err=True)
                click.echo(f"mnemolog: {e.format_message()}", err=True)
            sys.exit(usage.exit_code)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv


@contextmanager
def writer_for(ctx: Ctx, **kw: Any) -> Iterator[Any]:
    """Open the home's log writer, report any torn tail it cut on open, close it."""
    w = ctx.home.open_writer(**kw)
    try:
        for t in w.recovered:
            ctx.info(f"mnemolog: recovery: {t.describe()}")
        yield w
    finally:
        w.close()
        for message in w.take_warnings():
            ctx.info(f"mnemolog: warning: {message}")


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    from mnemolog.eventlog.errors import BadInput

    if len(text) > 1024 * 1024:
        raise BadInput(f"{what}: larger than 1 MiB", field=what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}", field=what) from exc
    if not isinstance(value, dict):
        raise BadInput(f"{what} must be a JSON object, found {type(value).__name__}", field=what)
    return value
