"""Long memories of the kind users store: a sectioned post-mortem far beyond ten atoms of 200 tokens.

Its sections use the heading styles people actually write: a title line, a
Markdown heading, a short line on its own ("Why it was so bad."), a line
ending in a colon that leads a list, and an underlined (setext) heading.
"""

from __future__ import annotations

LONG_POST_MORTEM = """Post-mortem: the ledger replication outage of 2 June

Summary

On 2 June the ledger service stopped accepting writes for 3 hours and 12 minutes. \
The outage began at 13:04 UTC when the primary database in the eu-west region lost \
its replication link to the two standbys and, following its configuration, refused \
every write that could not be confirmed by at least one standby. Reads kept working \
from the primary's cache, so dashboards looked healthy while every payment, refund and \
transfer queued behind the write path. The incident was declared at 13:19 UTC, \
escalated to a major incident at 13:40 UTC, and closed at 16:16 UTC after the \
standbys were rebuilt from a fresh base backup. No data was lost. About 41,000 \
payment attempts failed and had to be retried by customers or by our own retry queue.

Background
==========

The ledger service records every movement of money between customer accounts, \
merchant accounts and our settlement accounts at partner banks. It runs on one \
primary database and two standbys in the eu-west region, with a third standby in \
eu-central for disaster recovery. Every write is acknowledged to the caller only \
after at least one standby has received it, so that losing the primary never loses a \
payment that a customer was told had succeeded. The standbys authenticate to the \
primary with client certificates issued by our internal certificate authority. In \
April the security team created a new intermediate authority, because the old one \
had been issued with a key length that our compliance auditors no longer accept. \
Services were to be moved to certificates from the new intermediate over the \
following two months, one group at a time, with the database tier scheduled last. \
The rotation on 2 June was the first one that moved a database client to the new \
intermediate, and it was started by the automated rotation job rather than by a \
person, because the job had been told in May that the new intermediate was ready.

## Timeline

At 12:58 UTC a routine certificate rotation replaced the client certificates the \
standbys use to authenticate to the primary. The new certificates were issued by the \
new intermediate authority, which the primary did not yet trust. At 13:04 UTC the \
standbys' existing replication sessions expired and their reconnections were refused \
with a handshake error. At 13:05 UTC the primary switched to its safe mode and began \
refusing writes. At 13:11 UTC the first alert fired, but it was routed to the \
platform team's low-priority channel because its severity label was missing. At \
13:19 UTC a payments engineer noticed the write errors in the checkout logs and \
declared an incident. At 13:32 UTC the on-call database engineer joined and \
identified the refused replication sessions. At 13:40 UTC the incident was escalated \
and the certificate rotation was suspected. At 14:05 UTC the old certificates were \
restored on one standby, but the standby had fallen too far behind and the primary \
had already recycled the write-ahead log segments it needed. At 14:20 UTC the team \
decided to rebuild both standbys from a base backup. At 15:48 UTC the first standby \
caught up, and at 15:51 UTC writes resumed. At 16:16 UTC the second standby caught up \
and the incident was closed.

## Impact

Customers could not complete payments, refunds or transfers for just over three \
hours. The checkout page showed a generic error, which led to 2,300 support tickets \
in the first hour alone. About 41,000 payment attempts failed; 29,000 were retried \
successfully by the retry queue after writes resumed, and the rest were retried by \
customers or abandoned. Partner banks received their settlement files four hours \
late, which breached the contractual deadline with two of them. The finance team \
estimates the direct cost at 180,000 euros in lost transaction fees and penalties. \
Merchants were affected unevenly: those who accept only card payments lost almost all \
of their sales for the three hours, while those who also accept bank transfers kept \
about a third of theirs. Our largest merchant, a ticketing company, was in the middle \
of a concert presale and has asked for a separate report, which the account team will \
send by 20 June.

## Detection

The first signal was an alert on the replication lag of the standbys, which fired at \
13:11 UTC. The alert was defined two years ago by a team that has since been merged \
into the platform group, and its definition never carried a severity label. Our \
alert router sends unlabelled alerts to the low-priority channel, where they are \
reviewed once a day. A second alert, on the error rate of the ledger's write \
endpoint, did not fire at all: its threshold was set at 50% of requests over ten \
minutes, and the write endpoint carries only a small share of the ledger's traffic, \
so the overall error rate stayed at 11%. The checkout team's own dashboard showed the \
failures within a minute, but nobody was watching it at the time. The incident was \
finally declared by a payments engineer who was debugging an unrelated test failure \
and saw the write errors scroll past in the checkout logs.

## Response

The incident commander opened the usual bridge at 13:21 UTC and paged the database \
on-call engineer, who was travelling and joined from a train at 13:32 UTC. The first \
twenty minutes of the bridge were spent on the checkout service, because its errors \
were the visible symptom and its last deploy was only an hour old. Rolling back that \
deploy at 13:28 UTC changed nothing. Once the database engineer joined, the refused \
replication handshakes were found in the primary's log within four minutes, and the \
certificate rotation at 12:58 UTC became the obvious suspect. Restoring the old \
certificates was tried first because it looked quick. It worked for the handshake, \
but the standby then asked for write-ahead log segments that the primary had already \
recycled, and replication could not resume. The team considered promoting a standby \
instead, but both standbys were more than an hour behind, and promoting either would \
have lost acknowledged writes. The rebuild from a base backup was the only option that \
kept every acknowledged write, and it was chosen at 14:20 UTC.

## Root cause

The root cause was a certificate rotation that changed the issuing authority without \
first distributing the new authority to every service that validates those \
certificates. The rotation runbook listed the services that present the certificates \
but not the services that verify them. The database primary verifies the standbys' \
client certificates against a trust bundle that is baked into its image, and that \
image had not been rebuilt since the new authority was created. Nothing in the \
rotation tooling checked that verifiers trusted the new issuer before switching.

Why it was so bad.

The primary's safe mode turned a replication fault into a full write outage. That \
behaviour is deliberate: it protects against losing acknowledged writes if the \
primary fails while no standby has them. But nobody on the current team knew that the \
safe mode existed, and it was not mentioned in the runbook. The missing severity label \
delayed the response by eight minutes. The standbys could not simply reconnect once \
the certificates were fixed, because the primary keeps only 64 gigabytes of \
write-ahead log, which at peak traffic covers about forty minutes. Rebuilding a \
standby from a base backup takes about ninety minutes for a database of this size, \
and it could not start until the decision was made at 14:20 UTC.

What went well

The payments retry queue worked as designed and recovered most failed attempts \
without any manual work. The database engineer's diagnosis of the refused handshakes \
was fast once they joined. The base backups were recent and restored without errors, \
and the rebuilt standbys passed their consistency checks on the first attempt. \
Communication with partner banks started within the first hour and kept them informed \
every thirty minutes. The decision to rebuild rather than promote a standby was made \
calmly and recorded in the incident channel with its reasons, which made this review \
much easier to write. The incident commander handed over to a fresh commander after \
two hours, as our process asks, and the handover note was complete enough that no \
question had to be asked twice. Finally, the certificate rotation job logged every \
step it took, with the serial numbers of the old and new certificates, so the change \
that started the outage could be identified with certainty rather than by guesswork, \
and the staging replay could use exactly the same certificates and configuration.

Follow-up analysis

After the incident we replayed the rotation in staging with the same images and the \
same configuration, and the outage reproduced exactly: the standbys were refused \
within six minutes of the rotation, and the primary entered its safe mode a minute \
later. We then checked every other service that verifies certificates from our \
internal authority. Eleven of them still trusted only the old intermediate, among \
them the message broker, the secrets store and the internal package mirror. Any of \
them would have failed in the same way when its clients were rotated. Three of the \
eleven are verified by services whose images are rebuilt weekly, so they would have \
recovered on their own within days, but the other eight bake their trust bundles \
into images that are rebuilt only on a release. We also measured how much \
write-ahead log the primary produces: 1.6 gigabytes a minute at peak and 0.4 \
gigabytes a minute at night. With 160 gigabytes of retention a standby can be \
disconnected for about an hundred minutes at peak and still catch up without a \
rebuild, which covers the longest outage of a standby we have seen in two years.

Customer communication

The status page was updated at 13:47 UTC, forty-three minutes after the outage began, \
because the status page is owned by the support team and they learned of the incident \
from the tickets rather than from the bridge. The first update said that payments were \
"degraded", which customers read as slow rather than failing, and many of them retried \
the same payment several times. The retry queue deduplicated those attempts, so nobody \
was charged twice, but the repeated failures made the experience worse. Later updates \
were accurate and went out every thirty minutes. Partner banks were told by the \
settlement team directly, by phone, at 13:55 UTC.

Lessons learned
---------------

Safe modes must be documented where the on-call engineer will look during an \
incident, not only in the design documents of the service. A certificate rotation \
is a change to every verifier as well as every presenter, and both lists belong in \
the runbook. Alerts without a severity label should default to the highest severity, \
not the lowest. Keeping more write-ahead log is cheap compared with a ninety-minute \
rebuild, and the retention should cover at least two hours of peak traffic.

## Open questions

We do not yet know why the rotation job treated the new intermediate as ready for \
database clients when the plan scheduled them last. The job reads a readiness flag \
per authority, not per group of services, and the flag was set in May when the first \
group moved. Whether the flag should be per group, or whether the job should verify \
trust on the far side before every switch, is being decided by the security and \
platform teams together. We also do not know whether the safe mode should stay as it \
is. Some engineers argue that a primary which refuses writes for hours protects the \
ledger too well, and that a time limit after which it accepts writes with a single \
copy would be the better trade. Others point out that the ledger's contract with \
partner banks forbids acknowledging a payment that could later be lost, so a time \
limit would need their agreement. A decision is expected by the end of the quarter, \
and until then the safe mode stays as it is, now documented in the runbook.

Action items:
- Add every certificate verifier to the rotation runbook and make the tooling check \
trust before switching issuers (owner: security engineering, due 16 June).
- Rebuild the database images whenever a trust bundle changes (owner: platform, due 23 June).
- Document the primary's safe mode in the database runbook, with the exact error \
messages it produces (owner: database team, due 9 June).
- Route alerts without a severity label to the paging channel (owner: observability, due 12 June).
- Raise write-ahead log retention to 160 gigabytes (owner: database team, due 30 June).
- Run a game day that rotates certificates in staging with a verifier left out (owner: SRE, due 14 July).

Appendix: configuration at the time

The primary ran with synchronous commit set to remote write and a quorum of one \
standby. Write-ahead log retention was 64 gigabytes, and the archive of old segments \
was kept for seven days in object storage, which the standbys were not configured to \
read from. The certificates had a lifetime of ninety days and were rotated \
automatically thirty days before expiry. The trust bundle in the database image \
contained the old intermediate authority and the root, but not the new intermediate. \
The alert on replication lag used a threshold of sixty seconds, evaluated every \
minute, and its route depended on a severity label that was absent.
"""
