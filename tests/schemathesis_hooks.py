"""schemathesis hooks of the run in tests/test_service_schema.py (loaded through SCHEMATHESIS_HOOKS)."""

import re

import jsonschema_rs
import schemathesis
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case
from schemathesis.transport.serialization import Binary

#: Multipart fields the schema types as strings.
_TEXT_FIELDS = {"captions", "q"}
_FILTER = (r"not a date|is in the future|unknown filter|the value is missing|the kind is video, image or audio"
           r"|is given too|has: takes|not a duration")
#: An upload that is no decodable video or image (``reelsearch.media.decode``), or a moment beyond its end.
_UPLOAD = (r"cannot read file|file is empty|not a readable media file|no video stream|unsupported video codec"
           r"|is too large|seek failed|corrupt|duration unknown|clip window|no frame could be decoded"
           r"|s is outside the video")
#: Why an operation may refuse a schema-valid request, as its ``detail`` says it: the reasons its 400 and 422 declare
#: that no schema can express (tests/schemathesis.toml lets those statuses through; this check keeps them honest).
#: A refusal for any other reason is a finding.
REFUSALS = {
    "GET /search": {400: r"^give q, like or both, or filters$|^t needs like|s is outside the video|holds no \w+ cue",
                    422: _FILTER},
    "POST /search/like": {400: _UPLOAD, 422: _FILTER + r"|^\w+ given in the query string \(.*\) and the form"},
    "POST /annotate": {400: _UPLOAD},
}


@schemathesis.hook
def filter_case(context, case) -> bool:
    """Drop multipart cases that are not what they claim to be once on the wire.

    A multipart field is text, whatever the generator meant: a non-string value of a string field (``{}`` for
    ``captions``) arrives as a valid string, and a list arrives as that many fields, so an empty or one-item list
    is a field left out or given once, both valid. schemathesis 4.32 skips such type mutations for query, header,
    path and urlencoded fields but not for multipart ones (its fuzzing and stateful phases then report the server
    for accepting "invalid" data it never received). A list of two or more is kept: the server refuses a field given
    twice. And schemathesis does not check that a "negative" body holding a file is invalid (it skips validation of
    any value with binary data), so a mutation that left the fields valid is sent as invalid: such a case is
    dropped when the body, its file aside, is valid.
    """
    if case.media_type != "multipart/form-data" or not isinstance(case.body, dict):
        return True
    for name, value in case.body.items():
        if isinstance(value, list) and len(value) < 2 and name != "file":
            return False
        if name in _TEXT_FIELDS and not isinstance(value, (str, list)):
            return False
    if case.meta is not None and not case.meta.generation.mode.is_positive:
        schema = next(b.definition["schema"] for b in case.operation.body if b.media_type == case.media_type)
        fields = {name: "" if isinstance(value, Binary) else value for name, value in case.body.items()}
        return not jsonschema_rs.validator_for(schema).is_valid(fields)
    return True


@schemathesis.check
def refused_for_a_declared_reason(ctx, response, case):
    """A schema-valid request answered 400 or 422 (where tests/schemathesis.toml allows it) was refused for one of
    the reasons the operation declares, never for another."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or is_unexpected_http_status_case(case):
        return None
    reasons = REFUSALS.get(case.operation.label, {}).get(response.status_code)
    if reasons is None:
        return None  # positive_data_acceptance judges it
    detail = response.json().get("detail", "")
    if not re.search(reasons, detail):
        raise AssertionError(f"schema-valid request refused ({response.status_code}) for a reason the schema does not "
                             f"declare: {detail!r}")
    return None
