"""The rules extractor: deterministic, offline extraction of candidates from an interaction.

It finds what people mark as worth keeping and nothing else:

1. Labels. A line ``Decision: ...`` (also bulleted, bold, or with a dash
   instead of the colon), or a bullet under a heading such as ``## Decisions``,
   is a candidate of that label. Labels: decision, requirement, constraint,
   fact, preference, and the insight family (lesson, lesson learned, insight,
   takeaway, gotcha, rule of thumb, learned).
2. Sentences. Outside labelled lines, a sentence is a candidate when it says
   so in words: "we decided to ...", "we agreed ...", "the decision is ..."
   (decision); "I prefer ...", "I'd rather ...", "please always ..."
   (preference); "the requirement is ...", "... must not exceed ..."
   (requirement, constraint); "it turns out ...", "we found that ...", "the
   root cause was ...", "... breaks down below ..." (insight).
3. Layers. Decisions, requirements, constraints and facts are project
   knowledge. Preferences are the person's, with no project. An insight is
   domain knowledge (no project, one domain tag) when it names a domain's
   terms and does not speak of the project itself ("we", "our", the project's
   name); otherwise it is project knowledge.
4. Length and repeats. Code blocks are skipped; a candidate is 20..500
   characters and at least four words; questions are not candidates; a
   repeated candidate (same layer, same words) is kept once; at most 8 per
   interaction.

A domain is chosen by counting the distinct terms of each domain's lexicon
in the sentence; ties go to the earlier domain in the built-in list. Domains
added by configuration have no lexicon, so only the LLM extractor tags them.
The whole rule set is fingerprinted (``RULES_SHA256``) and recorded in the
place an LLM extractor records its prompt's hash.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from mnemolog.curators.knowledge.extract import (
    MAX_CANDIDATES,
    MIN_CANDIDATE_CHARS,
    Candidate,
    Extraction,
    InteractionText,
    Layer,
    kept,
)
from mnemolog.eventlog.vocabulary.knowledge import DOMAINS

VERSION: Final = "1"
MAX_RULE_CHARS: Final = 500
MIN_WORDS: Final = 4


@dataclass(frozen=True, slots=True)
class _Rule:
    """What a label or sentence pattern makes: its kind, layer and confidence."""

    name: str
    kind: str
    layer: Layer | None  # None: decided per sentence (the insight family)
    labelled: float  # confidence when marked by a label or heading
    sentence: float  # confidence when found by a sentence pattern


RULES: Final[dict[str, _Rule]] = {
    "decision": _Rule("decision", "decision", "project", 0.85, 0.8),
    "requirement": _Rule("requirement", "project", "project", 0.85, 0.75),
    "constraint": _Rule("constraint", "project", "project", 0.85, 0.75),
    "fact": _Rule("fact", "project", "project", 0.75, 0.7),
    "preference": _Rule("preference", "user", "preference", 0.85, 0.8),
    "insight": _Rule("insight", "knowledge", None, 0.75, 0.65),
}

#: Label words (lowercase, singular or plural) and the rule each stands for.
LABELS: Final[dict[str, str]] = {
    "decision": "decision",
    "decisions": "decision",
    "decided": "decision",
    "key decision": "decision",
    "key decisions": "decision",
    "requirement": "requirement",
    "requirements": "requirement",
    "req": "requirement",
    "constraint": "constraint",
    "constraints": "constraint",
    "hard constraint": "constraint",
    "limit": "constraint",
    "limits": "constraint",
    "fact": "fact",
    "facts": "fact",
    "key fact": "fact",
    "key facts": "fact",
    "preference": "preference",
    "preferences": "preference",
    "lesson": "insight",
    "lessons": "insight",
    "lesson learned": "insight",
    "lessons learned": "insight",
    "learned": "insight",
    "insight": "insight",
    "insights": "insight",
    "key insight": "insight",
    "takeaway": "insight",
    "takeaways": "insight",
    "key takeaway": "insight",
    "gotcha": "insight",
    "gotchas": "insight",
    "rule of thumb": "insight",
}

#: Sentence patterns per rule (case-insensitive, searched anywhere in the sentence).
SENTENCE_PATTERNS: Final[dict[str, tuple[str, ...]]] = {
    "decision": (
        r"\bwe(?:'ve| have)? (?:decided|agreed|chose|settled on|opted|went with)\b",
        r"\bI(?:'ve| have)? decided\b",
        r"\bthe decision (?:is|was|has been)\b",
        r"\bwe(?:'re| are) going (?:with|to go with)\b",
        r"\bwe will go with\b",
    ),
    "preference": (
        r"\bI prefer\b",
        r"\bI(?:'d| would) rather\b",
        r"\bI(?:'d| would) prefer\b",
        r"\bmy preference is\b",
        r"\bI (?:always|never) (?:use|want|write|run)\b",
        r"\bplease (?:always|never)\b",
    ),
    "requirement": (
        r"\bthe requirement (?:is|was)\b",
        r"\bis a (?:hard )?requirement\b",
        r"\b(?:it|this) is required (?:that|to)\b",
        r"\bmust (?:support|handle|be compatible)\b",
    ),
    "constraint": (
        r"\bthe (?:hard )?(?:constraint|limit) (?:is|was)\b",
        r"\bmust (?:not|never) (?:exceed|go (?:above|below)|drop below)\b",
        r"\bmust (?:stay|remain) (?:below|under|within|above|between)\b",
        r"\bcannot exceed\b",
        r"\bis limited to\b",
    ),
    "insight": (
        r"\bit turns out\b",
        r"\bturned out (?:that|to be)\b",
        r"\bwe (?:found|learned|discovered|noticed|saw) that\b",
        r"\bthe root cause (?:is|was)\b",
        r"\bthe (?:lesson|trick|catch|key insight) (?:is|was|here is)\b",
        r"\bbreaks down (?:below|above|when|under|past|beyond)\b",
        r"\bas a rule of thumb\b",
        r"\bin our experience\b",
        r"\bthe hard way\b",
    ),
}

#: Per domain, "|"-separated word prefixes that name its subject matter (matched at a word start).
_LEXICON_TEXT: Final[dict[str, str]] = {
    "physics": (
        "diffract|wavefront|wavelength|photon|heat transfer|conduct|convect|refract|"
        "interference|polariz|polaris|thermal gradient|temperature|radiat|thermal effect"
    ),
    "materials": (
        "zerodur|cte|thermal expansion|alloy|steel|alumin|titanium|invar|ceramic|"
        "borosilicate|composite|carbon fib|epoxy|adhesive|creep|fatigue|yield strength|"
        "corrosion|hardness|polymer|silicon carbide|outgass|brittle"
    ),
    "optics": (
        "lens|mirror|aberration|coma|astigmat|zernike|focal|f/|wfe|optical|telescope|"
        "collimat|prism|spherical|primary mirror"
    ),
    "mechanics": (
        "fea|finite element|support pad|whiffletree|kinematic|flexure|bolt|stiffness|"
        "deflect|vibration|modal|preload|torque|bearing|mount|gravity sag"
    ),
    "manufacturing": (
        "polish|grind|machin|preston|dwell|tool path|edge roll|tool wear|quilting|lapping|cnc|milling|slurry|"
        "fixture|removal rate|pitch lap|weld|3d print|injection mold"
    ),
    "metrology": (
        "interferomet|calibrat|measurement|metrology|gauge|probe|uncertainty|repeatab|"
        "cmm|profilomet|twyman|null test|fringe"
    ),
    "controls": (
        "pid|servo|feedback loop|control loop|setpoint|actuator|force control|loop gain|"
        "overshoot|bandwidth|integrator|windup|real-time"
    ),
    "software": (
        "api|database|sql|query|index|cache|deploy|docker|kubernetes|container|unit test|"
        "test suite|integration test|ci |git|python|javascript|typescript|rust|thread|"
        "async|mutex|memory leak|http|json|schema|migration|endpoint|library|compiler|"
        "build|server|latency|timeout|retry|retries|connection pool|postgres|sqlite|"
        "duckdb|redis|oauth|token|log|regex|pytest|ruff|mypy"
    ),
    "math": (
        "algorithm|optimi|regression|numerical|solver|matrix|eigen|gradient descent|"
        "statistic|variance|monte carlo|interpolat|converge|least squares|fft|fourier|"
        "floating point|rounding"
    ),
    "finance": (
        "cost|price|pricing|budget|vendor|procurement|quote|invoice|licens|subscription|"
        "usd|eur|capex|opex|margin|cheaper"
    ),
}
LEXICON: Final[dict[str, tuple[str, ...]]] = {d: tuple(t.split("|")) for d, t in _LEXICON_TEXT.items()}

#: Words that tie a sentence to the project at hand rather than to a field.
_PROJECT_TALK: Final = re.compile(
    r"\b(?:we|we're|we've|our|ours|us|this project|the project|this repo|our repo|here)\b", re.IGNORECASE
)

_FENCE: Final = re.compile(r"^\s*(?:```|~~~)")
_HEADING: Final = re.compile(r"^\s{0,3}#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
_BOLD_LINE: Final = re.compile(r"^\s*(?:\*\*|__)(?P<text>[^*_]+?)(?:\*\*|__)\s*:?\s*$")
_COLON_LINE: Final = re.compile(r"^\s*(?P<text>[A-Za-z][A-Za-z ]{1,30}):\s*$")
_BULLET: Final = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+(?P<text>.+)$")
_INLINE_LABEL: Final = re.compile(
    r"^\s*(?:(?:[-*+•]|\d{1,3}[.)])\s+)?(?:\*\*|__)?(?P<label>[A-Za-z][A-Za-z ]{1,30}?)(?:\*\*|__)?"
    r"\s*(?:[:：]|\s[-–—]\s)\s*(?:\*\*|__)?\s*(?P<text>.+)$"
)
# A sentence ends at . ! ? … followed by space and a character that is not a
# lowercase letter or digit; "e.g." and decimals never end one.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?…])[\"')\]]*\s+(?=[^a-z0-9\s])")
_ABBREVIATION: Final = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|approx|cf|fig|no|dr|mr|ms)\.)$", re.IGNORECASE)
_CLAUSE: Final = re.compile(r"\s*;\s+|,\s+(?:and|but)\s+")
_FIRST_PERSON: Final = re.compile(r"\b(?:I|I'm|I've|I'd|me|my|mine)\b")
_MARKUP: Final = re.compile(r"(?:\*\*|__|`)")
_WORDS: Final = re.compile(r"\w+")

_COMPILED: Final[dict[str, re.Pattern[str]]] = {
    rule: re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    for rule, patterns in SENTENCE_PATTERNS.items()
}


def _lexicon_alternative(term: str) -> str:
    # Terms of three letters or fewer ("cte", "api", "eur") are whole words, so
    # "feature" is not "fea"; longer ones are prefixes ("polish" finds "polishing").
    whole = len(term) <= 3 and term[-1].isalnum()
    return re.escape(term) + (r"(?!\w)" if whole else "")


#: Which domains each lexicon term belongs to.
_TERM_DOMAINS: Final[dict[str, tuple[str, ...]]] = {
    term: tuple(d for d, terms in LEXICON.items() if term in terms)
    for terms in LEXICON.values()
    for term in terms
}
# One zero-width match at every word start where a term begins (longest term
# first), so overlapping terms are all seen in one pass over the text.
_LEXICON_SCAN: Final = re.compile(
    r"(?<!\w)(?=("
    + "|".join(_lexicon_alternative(t) for t in sorted(_TERM_DOMAINS, key=lambda t: (-len(t), t)))
    + "))",
    re.IGNORECASE,
)


def _fingerprint() -> str:
    material = json.dumps(
        {
            "version": VERSION,
            "domain_choice": "hits + 1 for the first named; ties: first mention, list order",
            "rules": {k: [r.kind, r.layer, r.labelled, r.sentence] for k, r in RULES.items()},
            "labels": LABELS,
            "patterns": SENTENCE_PATTERNS,
            "lexicon": LEXICON,
            "whole_words_up_to": 3,
            "project_talk": _PROJECT_TALK.pattern,
            "limits": [MIN_CANDIDATE_CHARS, MAX_RULE_CHARS, MIN_WORDS, MAX_CANDIDATES],
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


#: Recorded where an LLM extractor records its prompt's hash: any change to the rules shows in the log.
RULES_SHA256: Final = _fingerprint()


def guess_domain(text: str) -> str | None:
    """The built-in domain ``text`` is most about, or None when it names no domain's terms.

    Each domain scores the number of its lexicon terms present, plus one for
    the domain named first (a sentence's subject usually comes first); ties go
    to the earlier mention, then to the list order.
    """
    first_seen: dict[str, int] = {}
    terms_seen: dict[str, set[str]] = {}
    for match in _LEXICON_SCAN.finditer(text):
        term = match.group(1).lower()
        for domain in _TERM_DOMAINS.get(term, ()):
            first_seen.setdefault(domain, match.start())
            terms_seen.setdefault(domain, set()).add(term)
    scored = [
        (len(terms_seen[domain]), first_seen[domain], order, domain)
        for order, domain in enumerate(DOMAINS)
        if domain in first_seen
    ]
    if not scored:
        return None
    first = min(scored, key=lambda s: (s[1], s[2]))
    best = max(scored, key=lambda s: (s[0] + (s is first), -s[1], -s[2]))
    return best[3]


def label_rule(text: str) -> str | None:
    """The rule a label or heading text stands for ("Decisions", "Lessons learned"), or None."""
    cleaned = _MARKUP.sub("", text).strip().strip(":").strip().lower()
    return LABELS.get(cleaned)


def sentence_rule(sentence: str) -> str | None:
    """The first rule (in RULES order) whose sentence patterns match, or None."""
    for rule, pattern in _COMPILED.items():
        if pattern.search(sentence):
            return rule
    return None


def sentences(text: str) -> list[str]:
    """``text`` split into sentences (abbreviations such as "e.g." do not end one)."""
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[start : match.start()].rstrip()
        if _ABBREVIATION.search(head.split()[-1] if head.split() else ""):
            continue
        out.append(text[start : match.start()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


@dataclass(frozen=True, slots=True)
class _Found:
    rule: str
    text: str
    labelled: bool
    source: str


def _lines_outside_code(text: str) -> Iterator[str]:
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.startswith(("    ", "\t")):
            yield line


def _heading_text(line: str) -> str | None:
    for pattern in (_HEADING, _BOLD_LINE, _COLON_LINE):
        match = pattern.match(line)
        if match:
            return match.group("text")
    return None


def _sentence_found(sentence: str, source: str) -> Iterator[_Found]:
    inline = _INLINE_LABEL.match(sentence)
    if inline and label_rule(inline.group("label")) is not None:
        rule = label_rule(inline.group("label"))
        assert rule is not None
        yield _Found(rule, inline.group("text"), True, source)
        return
    rule = sentence_rule(sentence)
    if rule is None:
        return
    # A sentence joining two marked statements ("I prefer X, and please never Y")
    # gives one candidate per statement.
    clauses = [c for c in _CLAUSE.split(sentence) if c.strip()]
    marked = [(c, sentence_rule(c)) for c in clauses]
    if len(clauses) > 1 and all(r is not None for _, r in marked):
        pieces = [(c.strip(), r) for c, r in marked]
    else:
        pieces = [(sentence, rule)]
    for text, piece_rule in pieces:
        assert piece_rule is not None
        # "I prefer" in the agent's own reply is the agent talking, not the person.
        if piece_rule == "preference" and source != "prompt":
            continue
        yield _Found(piece_rule, text, False, source)


def _scan(text: str, source: str) -> Iterator[_Found]:
    section: str | None = None  # the rule of the heading we are under, if any
    paragraph: list[str] = []

    def flush() -> Iterator[_Found]:
        joined = " ".join(paragraph)
        paragraph.clear()
        for sentence in sentences(joined):
            yield from _sentence_found(sentence, source)

    for line in _lines_outside_code(text):
        if not line.strip():
            yield from flush()
            continue
        heading = _heading_text(line)
        if heading is not None:
            yield from flush()
            section = label_rule(heading)
            continue
        bullet = _BULLET.match(line)
        inline = _INLINE_LABEL.match(line)
        if inline and label_rule(inline.group("label")) is not None:
            yield from flush()
            rule = label_rule(inline.group("label"))
            assert rule is not None
            yield _Found(rule, inline.group("text"), True, source)
            continue
        if bullet:
            yield from flush()
            if section is not None:
                yield _Found(section, bullet.group("text"), True, source)
            else:
                paragraph.append(bullet.group("text"))
                yield from flush()
            continue
        paragraph.append(line.strip())
    yield from flush()


def _clean(text: str) -> str:
    return " ".join(_MARKUP.sub("", text).split()).strip()


def _acceptable(text: str) -> bool:
    if not MIN_CANDIDATE_CHARS <= len(text) <= MAX_RULE_CHARS:
        return False
    if text.endswith("?"):
        return False
    return len(_WORDS.findall(text)) >= MIN_WORDS


def _talks_about_project(text: str, project: str) -> bool:
    if _PROJECT_TALK.search(text):
        return True
    if project:
        lowered = text.lower()
        # "p04-gigabit" is mentioned as "p04" as often as by its full name.
        head = re.split(r"[-_.]", project.lower())[0]
        return project.lower() in lowered or (
            len(head) >= 2 and re.search(rf"\b{re.escape(head)}\b", lowered) is not None
        )
    return False


def _without_markers(text: str) -> str:
    # "we found that" marks an insight; it does not make the insight the project's.
    return _COMPILED["insight"].sub(" ", text)


def _domain_part(text: str, project: str) -> tuple[str, str] | None:
    """The (text, domain) of the general insight in ``text``, or None.

    The whole text when it names a domain and not the project; else its first
    clause (split at ";" or ": ") that does.
    """
    parts = [text] + [c.strip() for c in re.split(r";\s+|:\s+", text) if c.strip() and c.strip() != text]
    for part in parts:
        domain = guess_domain(part)
        if domain is not None and not _talks_about_project(_without_markers(part), project):
            return part, domain
    return None


def _candidates(found: _Found, project: str) -> list[Candidate]:
    rule = RULES[found.rule]
    text = _clean(found.text)
    confidence = rule.labelled if found.labelled else rule.sentence
    out: list[Candidate] = []
    if rule.name == "insight":
        general = _domain_part(text, project)
        if general is not None:
            part, domain = general
            out.append(
                Candidate(
                    layer="domain",
                    content=part,
                    kind="knowledge",
                    project="",
                    domains=(domain,),
                    confidence=confidence,
                    rule=rule.name,
                    source=found.source,
                )
            )
            if part == text:
                return out
        # What is left is how the insight played out on this project.
    elif rule.layer == "preference" and (not found.labelled or _FIRST_PERSON.search(text)):
        return [
            Candidate(
                layer="preference",
                content=text,
                kind=rule.kind,
                project="",
                confidence=confidence,
                rule=rule.name,
                source=found.source,
            )
        ]
    # A labelled preference that is not the speaker's ("Preference: the finance
    # team wants ...") belongs to the project.
    tag = guess_domain(text)
    out.append(
        Candidate(
            layer="project",
            content=text,
            kind=rule.kind if rule.layer in ("project", None) and rule.name != "insight" else "project",
            project=project,
            domains=(tag,) if tag is not None else (),
            confidence=confidence,
            rule=rule.name,
            source=found.source,
        )
    )
    return out


class RulesExtractor:
    """The deterministic extractor; the same interaction always gives the same candidates."""

    name: Final = "rules"
    version: Final = VERSION
    model: Final = None

    def extract(self, interaction: InteractionText, *, max_retries: int = 0) -> Extraction:
        """Candidates from the labels and sentence patterns of both sides of the exchange."""
        del max_retries  # nothing to retry: the rules give the same answer every time
        found = [*_scan(interaction.prompt, "prompt"), *_scan(interaction.response, "response")]
        warnings: list[str] = []
        candidates: list[Candidate] = []
        skipped = 0
        for item in found:
            for candidate in _candidates(item, interaction.project):
                if not _acceptable(candidate.content):
                    skipped += 1
                    continue
                candidates.append(candidate)
        if skipped:
            warnings.append(f"{skipped} marked passage(s) outside the length rules or phrased as questions")
        unique = kept(candidates, warnings)
        return Extraction(
            candidates=tuple(unique),
            extractor=self.name,
            version=self.version,
            model=None,
            prompt_sha256=RULES_SHA256,
            warnings=tuple(warnings),
            attempts=1,
            responses=(),
        )
