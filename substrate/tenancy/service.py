"""The tenancy service: scoped tokens (issued, revoked, listed, authenticated) and the one check
of a token's scope before an operation runs (`authorise`, which MCP, HTTP and `with_token` use).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mnemolog.eventlog.errors import Informational, NotFound, UsageError
from mnemolog.eventlog.vocabulary import events as v
from mnemolog.projections.recall import query as q
from mnemolog.substrate.tenancy.scope import (
    LEVELS,
    Access,
    Refusals,
    Scope,
    Scoped,
    ScopeRefused,
    TokenRefused,
    everything,
    mint,
    parse_expiry,
    parse_token,
    refusal_counts,
    shared_with,
    sharing,
)

if TYPE_CHECKING:
    from mnemolog.substrate.api import Substrate

__all__ = ["Tenancy"]

#: At most this many entries appended since the token table was read are scanned for token events.
TOKEN_SCAN = 256


class Tenancy:
    """Tokens and scopes over an open home (`Substrate.tenancy`)."""

    def __init__(self, sub: Substrate) -> None:
        self.sub = sub
        #: Namespaces declared shared (`[sharing]`), and the refusals of scoped tokens so far.
        self.sharing = sharing(sub.home.config.raw, str(sub.home.config_path))
        self.refusals = Refusals(sub.home.state_dir / "refusals.jsonl")
        self._token_rows: tuple[int, dict[tuple[str, str], dict[str, Any]]] | None = None

    def issue_token(
        self,
        level: str,
        *,
        namespaces: Sequence[str] = (),
        projects: Sequence[str] = (),
        expires: str | None = None,
        rate_per_minute: int | None = None,
        label: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """A new scoped token (a signed `token.issued`): the token is in the answer, and nowhere else.

        `expires` is a duration (`30d`) or an ISO 8601 UTC time; `tenant` is
        the name this home has under a tenant root (it is part of the token).
        """
        from mnemolog.substrate.events.tokens import TokenIssued

        if level not in LEVELS:
            raise UsageError(f"scope must be one of {', '.join(LEVELS)}; found {level!r}", field="scope")
        token, token_id, digest = mint(tenant)
        payload = TokenIssued(
            token_id=token_id,
            sha256=digest,
            level=level,
            namespaces=list(namespaces),
            projects=list(projects),
            expires_at=parse_expiry(expires, self.sub.clock()),
            rate_per_minute=rate_per_minute,
            label=label,
        )
        with self.sub.session() as s:
            r = s.append(payload)
        out = {k: v for k, v in payload.to_data().items() if k != "sha256"}
        return {"token": token, **out, "tenant": tenant, "seq": r.seq}

    def revoke_token(self, token_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Accept the token no more (a signed `token.revoked`); NotFound for an unknown id."""
        from mnemolog.projections import tokens as tq
        from mnemolog.substrate.events.tokens import TokenRevoked

        payload = TokenRevoked(token_id=token_id, reason=reason)
        with self.sub.session() as s:
            known = {t["token_id"]: t for t in tq.list_tokens(s.conn)}
            if token_id not in known:
                raise NotFound(f"no token with id {token_id!r}", id=token_id)
            if known[token_id]["revoked_seq"] is not None:
                raise Informational(
                    f"token {token_id} was revoked already (seq {known[token_id]['revoked_seq']})",
                    id=token_id,
                )
            r = s.append(payload)
        return {"token_id": token_id, "revoked": True, "seq": r.seq}

    def tokens(self) -> builtins.list[dict[str, Any]]:
        """Every token issued here (never a token itself): id, scope, state, refusals recorded."""
        from mnemolog.projections import tokens as tq

        with self.sub.session() as s:
            rows = tq.list_tokens(s.conn)
        now = self.sub.clock()
        refused = refusal_counts(self.refusals.path)
        for t in rows:
            t.pop("sha256", None)
            t["refusals"] = refused.get(t["token_id"], 0)
            t["state"] = (
                "revoked"
                if t["revoked_seq"] is not None
                else "expired"
                if t["expires_at"] is not None and t["expires_at"] <= now
                else "active"
            )
        return rows

    def authenticate(self, token: str, *, tenant: str | None = None) -> Scope:
        """The scope of a token this home issued.

        TokenRefused when it is unknown, revoked, expired or another tenant's.
        """
        from mnemolog.projections import tokens as tq

        named, token_id, digest = parse_token(token)
        if named != tenant:
            raise TokenRefused("this token belongs to another home")
        with self.sub.session() as s:
            # Every request of a server asks this: the table is kept in memory, and read again
            # only when an entry appended since (by any process) issued or revoked a token.
            size = self.sub.log.size
            cached = self._token_rows
            if cached is not None and cached[0] != size:
                fresh = size > cached[0] and size - cached[0] <= TOKEN_SCAN
                if fresh:
                    types = {e.type for e in self.sub.log.iter_entries(cached[0], size)}
                    fresh = not types & {v.TOKEN_ISSUED, v.TOKEN_REVOKED, v.LOG_ROLLBACK_ACCEPTED}
                cached = (size, cached[1]) if fresh else None
            if cached is None:
                cached = (size, {(t["token_id"], t["sha256"]): t for t in tq.list_tokens(s.conn)})
            self._token_rows = cached
        row = cached[1].get((token_id, digest))
        if row is None or row["revoked_seq"] is not None:
            raise TokenRefused("this token is unknown here or was revoked")
        if row["expires_at"] is not None and row["expires_at"] <= self.sub.clock():
            raise TokenRefused(f"token {token_id} has expired")
        namespaces = tuple(row["namespaces"])
        return Scope(
            level=row["level"] if row["level"] in LEVELS else "read",
            namespaces=namespaces,
            shared=shared_with(self.sharing, namespaces),
            projects=tuple(row["projects"]),
            token_id=token_id,
            tenant=tenant,
            rate_per_minute=row["rate_per_minute"],
        )

    def authorise(self, sc: Scope, access: Access, arguments: Mapping[str, Any], operation: str) -> None:
        """The one scope check, before an operation runs: ScopeRefused (recorded) or nothing."""
        try:
            self._authorise(sc, access, arguments, operation)
        except ScopeRefused as exc:
            self.refusals.record(sc, operation, exc)
            raise

    def _authorise(self, sc: Scope, access: Access, arguments: Mapping[str, Any], operation: str) -> None:
        refuse = ScopeRefused
        if not sc.allows(access.level):
            raise refuse(
                f"{operation} needs a {access.level} token; this one is {sc.level}",
                operation=operation,
                needs=access.level,
            )
        if not sc.bound:
            return
        if access.tenant_wide:
            raise refuse(
                f"{operation} answers about the whole home; this token is bound to {sc.describe()}",
                operation=operation,
            )
        writing = access.level != "read"
        for name in access.namespaces:
            ns = arguments.get(name)
            if not isinstance(ns, str):
                continue
            ok = (
                sc.writes_namespace(ns)
                if writing
                else sc.reads_namespace(ns)
                or any(r.startswith(ns.rstrip("/") + "/") for r in sc.within() or ())
            )
            if not ok:
                raise refuse(f"namespace {ns!r} is outside this token's scope", field=name)
        for name in access.projects:
            p = arguments.get(name)
            if isinstance(p, str) and p and sc.projects and p not in sc.projects:
                raise refuse(f"project {p!r} is outside this token's scope", field=name)
        for name in access.project_data:
            p = arguments.get(name)
            if isinstance(p, str) and p not in sc.projects:
                raise refuse(
                    f"project {p!r}: its state belongs to the home; this token is not bound to it",
                    field=name,
                )
        checks = [(n, writing) for n in access.ids] + [(n, False) for n in access.read_ids]
        if not checks and not access.histories:
            return
        with self.sub.session() as s:
            for name, write in checks:
                mid = arguments.get(name)
                m = s.get(mid) if isinstance(mid, str) else None
                if m is None:
                    continue  # the operation itself says it is not found
                if not (sc.writes(m) if write else sc.sees(m)):
                    raise refuse(f"memory {mid} is outside this token's scope", field=name)
            for name in access.histories:
                mid = arguments.get(name)
                if not isinstance(mid, str):
                    continue
                # A history is its entries: an edge or an atomisation names the other memories.
                around = q.touched_with(s.conn, mid)
                inside = q.allowed_ids(s.conn, around, everything(sc))
                if set(around) - inside:
                    raise refuse(
                        f"memory {mid}: its history names memories outside this token's scope", field=name
                    )

    def with_token(self, token: str, *, tenant: str | None = None) -> Scoped:
        """This home as a token's holder sees it: every call checked and confined (substrate.scope)."""
        return Scoped(self.sub, self.authenticate(token, tenant=tenant))
