"""How reelsearch shows things to people: a file name in display form, seconds as a clock, and a search's results as
``reelsearch search`` prints them, from their JSON form (``SearchResult.to_json``). The standard library alone, so
that the CLI prints an answer of a running ``reelsearch serve`` (``reelsearch.served``) without importing the search
stack, through the same code as a search in process."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

_CONTROLS = {c: f"\\x{c:02x}" for c in range(32)} | {0x7F: "\\x7f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}

#: Most results one search answers: the HTTP API's ``k`` and ``reelsearch search -k``.
MAX_K = 100
#: What a search says when its best hit is below the calibration's threshold, instead of presenting it as an answer.
NO_GOOD_MATCH_MESSAGE = "no good match: the closest videos are shown below"


def display_path(path: str | bytes | os.PathLike, *, one_line: bool = False) -> str:
    """``path`` as valid Unicode (undecodable bytes become U+FFFD); ``one_line`` escapes control characters."""
    text = os.fsencode(path).decode("utf-8", "replace")
    return text.translate(_CONTROLS) if one_line else text


def clock(seconds: float) -> str:
    """Seconds as ``m:ss.s`` (``h:mm:ss.s`` from an hour on)."""
    m, s = divmod(max(0.0, float(seconds)), 60)
    h, m = divmod(int(m), 60)
    return f"{h:d}:{m:02d}:{s:04.1f}" if h else f"{m:d}:{s:04.1f}"


def percent(confidence: float) -> str:
    """A confidence in whole percent, "<1%" below one percent (a 0.7% hit reads neither "0%", certainly wrong, nor
    "1%", a 1.3% one's equal)."""
    return "<1%" if confidence < 0.01 else f"{100 * confidence:.0f}%"


def match_line(match: dict) -> str:
    """A result's ``match`` (JSON form) on one line, the query's words in brackets: ``said at 0:01.2: First,
    [preheat] the [oven]``."""
    text, out, last = match["text"], [], 0
    for a, b in match["highlights"]:
        out += [text[last:a], "[", text[a:b], "]"]
        last = b
    verb = "said" if match["cue"] == "speech" else "written"
    return f"{verb} at {clock(match['moment'])}: " + display_path("".join(out) + text[last:], one_line=True)


#: What each source of a search is called where people read it (``experts`` keys; any other key is one of a mixture
#: model's picture experts).
SOURCES = {"visual": "picture", "speech": "words said", "ocr": "text on screen", "like": "the example"}


def matched(result: dict) -> str:
    """What a result (JSON form) matched by, in words: ``picture``, ``words said``, ``text on screen``, ``the
    example``, joined by `` + `` (the picture when it took part; a cue when its words matched)."""
    experts = result.get("experts")
    parts = []
    if result.get("kind") != "audio" and (experts is None or any(k not in SOURCES or k == "visual" for k in experts)):
        parts.append("picture")
    if experts is not None and "like" in experts:
        parts.append(SOURCES["like"])
    if result.get("match") is not None:
        parts.append(SOURCES[result["match"]["cue"]])
    return " + ".join(parts)


def detail_line(result: dict) -> str:
    """A result's raw numbers (JSON form), named: the ranking score (it orders one search's hits; a model with a
    querybank subtracts each video's offset from a query of seven words or more, so it is then mostly negative; it
    means nothing across searches) and each
    source's own score (a mixture's picture experts by name)."""
    out = (f"ranking score {result['score']:+.4f} (its sources' weighted scores, for seven words or more less the "
           "video's usual score: it orders this search's hits only)")
    experts = result.get("experts") or {}
    if experts:
        out += " · own scores: " + ", ".join(
            f"{SOURCES.get(k, 'picture expert ' + k)} {v:.3f}" for k, v in experts.items())
    return out


def result_lines(result: dict, rank: int, details: bool = False) -> str:
    """A result (JSON form) as ``reelsearch search`` prints it: rank, confidence, what matched, moment, date taken
    (UTC) and path (``(audio only)`` after a file of sound alone), then the match if any, then its moments (when more
    than one) and why its file is unavailable here (if it is); ``details``: a last line of the raw numbers
    (:func:`detail_line`)."""
    confidence = result.get("confidence")
    sure = "" if confidence is None else f"{percent(confidence):>3} confident  "
    what = matched(result)
    when = "" if result.get("kind") == "image" else f"{clock(result['moment'])}  "  # a photo has no time
    out = f"{rank:3d}. {sure}{what + '  ' if what else ''}{when}"
    if result.get("taken_at") is not None:
        out += datetime.fromtimestamp(result["taken_at"], UTC).strftime("%Y-%m-%d  ")
    out += display_path(result["path"], one_line=True)
    if result.get("kind") == "audio":
        out += "  (audio only)"
    if result.get("match") is not None:
        out += f"\n     {match_line(result['match'])}"
    moments = result.get("moments") or []
    if len(moments) > 1:
        out += "\n     moments: " + ", ".join(
            f"{clock(m['start'])}-{clock(m['end'])}" + (f" {percent(m['confidence'])}" if "confidence" in m else "")
            for m in moments)
    if result.get("unavailable") is not None:
        out += f"\n     unavailable here: {result['unavailable']}"
    if details:
        out += f"\n     {detail_line(result)}"
        if len(moments) > 1:
            out += " · moment scores: " + ", ".join(f"{m['score']:+.3f}" for m in moments)
    return out


def answer_lines(results: list[dict], *, weak: bool, filtered: str | None, as_json: bool,
                 details: bool = False) -> list[tuple[str, bool]]:
    """What ``reelsearch search`` prints of a search's ``results`` (JSON form, of the keys ``--json`` gives), as
    (line, to stderr): the filters in words (``filtered``), "no good match" when ``weak``, then the results as JSON
    (one line) or one entry each (``details``: with their raw numbers); under ``as_json`` only the JSON goes to
    stdout."""
    out = []
    if filtered:
        out.append((f"filtered: {filtered}", as_json))
    if weak:
        out.append((NO_GOOD_MATCH_MESSAGE, as_json))
    if as_json:
        return [*out, (json.dumps(results, ensure_ascii=False), False)]
    if not results:
        out.append(("no results: no indexed video passes the filters" if filtered else
                    "no results (is the index empty? run `reelsearch index PATH`)", False))
    return out + [(result_lines(r, rank, details), False) for rank, r in enumerate(results, 1)]
