"""The API's contract: limits, request and response models, and the responses each route declares.

Everything the service checks is declared here, so ``/openapi.json`` describes what the service really does (the
tests run schemathesis against it): string lengths and patterns, ``k``, caption counts, body sizes, and every status
code a route can answer.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Literal, Union

from fastapi import FastAPI, Header, Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model, model_validator
from starlette.datastructures import QueryParams

from reelsearch.display import MAX_K, NO_GOOD_MATCH_MESSAGE
from reelsearch.scoring.calibration import NO_GOOD_MATCH
from reelsearch.search.duplicates import DuplicateGroup
from reelsearch.search.filters import KEYS
from reelsearch.search.request import MAX_QUERY_CHARS
from reelsearch.search.results import SORTS, SearchResult

MAX_CAPTIONS = 1000
MAX_UPLOAD_BYTES = 512 << 20
MAX_JSON_BYTES = 8 << 20
#: Longest moment (``t``) accepted, seconds: a day.
MAX_SECONDS = 86400.0
#: White space: the characters of Python's str.isspace (what str.strip removes), spelled out so that every regex
#: engine — Python's, Rust's in pydantic, ECMA's in a browser — reads them alike.
SPACE = "\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: At least one character that is not white space.
NON_BLANK = f"[^{SPACE}]"
ID_PATTERN = "^[0-9]{1,18}$"
EXPERTS_PATTERN = "^(visual|speech|ocr)(,(visual|speech|ocr))*$"
B64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"


def _padded(pattern: str) -> str:
    """``pattern`` as a whole value, white space around it allowed (filter values are stripped)."""
    return f"^[{SPACE}]*(?:{pattern})[{SPACE}]*$"


def _any_case(*words: str) -> str:
    return "|".join("".join(f"[{c.upper()}{c}]" for c in word) for word in words)


_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_SECONDS = f"{_NUMBER}[{SPACE}]*[smh]?"
#: What each filter parameter accepts (``reelsearch.search.filters``), declared, not enforced by FastAPI: the filter
#: parser checks them and names what is wrong (422). A date may still be 422 when it does not exist (2023-02-30) or
#: starts in the future, which no pattern can say. Years 0001-9999.
FILTER_PATTERNS = {
    "after": _padded("(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
                     "(?:-(?:0?[1-9]|1[0-2])(?:-(?:0?[1-9]|[12][0-9]|3[01]))?)?"),
    "kind": _padded(_any_case("video", "image", "audio")),
    "duration": _padded(f"(?:>=|<=|>|<|=)?[{SPACE}]*{_SECONDS}|{_SECONDS}[{SPACE}]*-[{SPACE}]*{_SECONDS}"),
    "has": _padded(_any_case("speech", "text")),
}
FILTER_PATTERNS["before"] = FILTER_PATTERNS["after"]

DESCRIPTION = f"""Search videos with sentences; rank sentences for a video.

Limits: `q` and each caption 1-{MAX_QUERY_CHARS} characters and not blank; `k` 1-{MAX_K}; at most {MAX_CAPTIONS}
captions; JSON bodies up to {MAX_JSON_BYTES >> 20} MiB, uploads up to {MAX_UPLOAD_BYTES >> 20} MiB (413 beyond).
Paths are given twice: `path` and `name` for display (bytes that are not UTF-8 shown as U+FFFD) and `path_b64`, the
exact bytes of the file name in base64, which `/annotate` accepts back."""

VIDEO_ID = Path(..., description="A video's id (decimal digits; anything else is 404).",
                json_schema_extra={"pattern": ID_PATTERN}, examples=["1"])
RANGE = Header(None, alias="Range", description="`bytes=a-b`, `bytes=a-`, `bytes=-n`, several separated by commas.")
IF_RANGE = Header(None, alias="If-Range", description="The ETag or Last-Modified the client holds; the range is "
                  "sent only if it still matches, else the whole file.")

Caption = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NON_BLANK)]


class Error(BaseModel):
    detail: str = Field(description="What was wrong, for a person.")


def model_of(cls, name: str | None = None, **extra) -> type[BaseModel]:
    """The pydantic model of the JSON form of dataclass ``cls`` (``SearchResult.to_json``): its fields with their
    descriptions, nested dataclasses as their own models; a field that defaults to None is left out of the JSON when
    None (so: not required, never null). ``extra``: more fields, as ``create_model`` takes them."""
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        tp, default = _json_type(hints[f.name]), ...
        if f.default is None:
            tp = Union[tuple(a for a in typing.get_args(tp) if a is not type(None))]  # noqa: UP007
            default = None
        fields[f.name] = (tp, Field(default, description=f.metadata.get("description")))
    return create_model(name or cls.__name__, **fields, **extra)


def _json_type(tp):
    if dataclasses.is_dataclass(tp):
        return model_of(tp)
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        return Union[tuple(_json_type(a) for a in args)]  # noqa: UP007
    if typing.get_origin(tp) is list:
        return list[_json_type(args[0])]
    return tp


#: A search result as the API answers it: ``SearchResult`` and the links to its thumbnail and media.
Result = model_of(SearchResult, "Result", thumbnail=(str, Field(description="URL of the best frame's thumbnail.")),
                  media=(str, Field(description="URL of the file.")))


class SearchResponse(BaseModel):
    query: str | None = Field(description="The text searched for (null: by example only).")
    k: int
    no_good_match: bool = Field(description="The best result's confidence is below the model's calibrated "
                                            "threshold for the query's length and the library's size (docs/search.md; "
                                            f"{NO_GOOD_MATCH} for a calibration of version 4 or older): the results "
                                            "are the closest videos, not an answer. False when the model has no "
                                            "calibration.")
    message: str | None = Field(None, description=f'"{NO_GOOD_MATCH_MESSAGE}" when `no_good_match`.')
    like: str = Field(None, description="The example (query by example): `video ID`, `video ID@SECONDS`, or the "
                                        "uploaded file's name.")
    filters: dict[str, list[str]] = Field(None, description="The filters read from `q` and the filter parameters, "
                                                            "{key: [values as written]} (keys: after, before, folder, "
                                                            "kind, duration, has, exclude, phrase).")
    filtered: str = Field(None, description='The filters in words: `after 2023-07, not "people"`.')
    results: list[Result]


#: The filter parameters (``reelsearch.search.filters``: its keys, negative terms, phrases) and what each holds.
FILTER_HELP = {**KEYS, "exclude": "leave out what shows, says or writes this word",
               "phrase": "words that must be said or written, word for word"}


def filter_query(key: str, many: bool = False, field=Query):
    """The query parameter of filter ``key`` (``FILTER_HELP``; repeatable when ``many``): a FastAPI ``Query``, or
    (``field=Field``) a field of a model of query parameters."""
    what = FILTER_HELP[key]
    description = f"Filter: {what} (as `{key}:` in `q`{'; repeatable' if many else ''}; malformed: 422)."
    pattern = FILTER_PATTERNS.get(key, NON_BLANK)
    if many:
        return field([], description=description, json_schema_extra={"items": {"type": "string", "pattern": pattern}})
    return field(None, max_length=200, description=description, json_schema_extra={"pattern": pattern})


SORT_TEXT = "The order of the results: relevance (best first) or date (the same results, newest first)."


class SearchQuery(BaseModel):
    """The query parameters of ``GET /search`` (read by :func:`read_query`); the filters' patterns are declared, not
    enforced (``FILTER_PATTERNS``)."""

    q: str | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS, pattern=NON_BLANK,
                          description="What to look for (not blank; optional with `like`).",
                          examples=["a dog catches a frisbee"])
    k: int = Field(10, ge=1, le=MAX_K, description="Number of results.")
    moments: int = Field(3, ge=0, le=100, description="Each result's best moments (segments) to give.")
    experts: str | None = Field(None, pattern=EXPERTS_PATTERN, max_length=64,
                                description="Experts to fuse, comma-separated (default: all the index holds; a cue "
                                            "the index lacks is 400).", examples=["visual,speech,ocr"])
    like: str | None = Field(None, pattern=ID_PATTERN, description="Videos like this indexed video (its id; unknown: "
                                                                   "404).")
    t: float | None = Field(None, ge=0, le=MAX_SECONDS, description="With `like`: like its moment at this many "
                                                                    "seconds (beyond the video: 400).")
    after: str | None = filter_query("after", field=Field)
    before: str | None = filter_query("before", field=Field)
    folder: list[str] = filter_query("folder", many=True, field=Field)
    kind: str | None = filter_query("kind", field=Field)
    duration: list[str] = filter_query("duration", many=True, field=Field)
    has: list[str] = filter_query("has", many=True, field=Field)
    exclude: list[str] = filter_query("exclude", many=True, field=Field)
    phrase: list[str] = filter_query("phrase", many=True, field=Field)
    sort: Literal[SORTS] = Field("relevance", description=SORT_TEXT)

    def filter_options(self) -> dict:
        """The filter parameters by name (``FILTER_HELP``), as ``reelsearch.search.filters.filter_pairs`` reads
        them."""
        return {key: getattr(self, key) for key in FILTER_HELP}


def read_query(model: type[BaseModel], params: QueryParams) -> BaseModel:
    """``model`` of a request's query parameters as FastAPI reads a model of query parameters (a list field takes
    every value, another field the last; an absent or empty one its default; another parameter is ignored), in
    one validation: RequestValidationError as FastAPI's (errors located in "query"). A route that reads its query
    so (``GET /search``: about 0.2 ms less a request than FastAPI's parameters, checked one by one in Python)
    declares them by ``query_parameters``."""
    values = {}
    for name, many in _query_fields(model):
        value = params.getlist(name) if many else params.get(name)
        if value is not None and value != []:
            values[name] = value
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in exc.errors()]) from None


@functools.cache
def _query_fields(model: type[BaseModel]) -> tuple[tuple[str, bool], ...]:
    """(name, whether a list: every value taken) of each field of ``model`` (``read_query``), read once."""
    return tuple((name, typing.get_origin(field.annotation) is list) for name, field in model.model_fields.items())


def query_parameters(model: type[BaseModel]) -> list[dict]:
    """The OpenAPI parameters FastAPI declares for ``model`` as a route's query parameters (``Annotated[model,
    Query()]``): those of a route that reads its query by :func:`read_query` (its ``openapi_extra``)."""
    app = FastAPI()

    def route(params):
        """A route taking ``model``'s query parameters."""

    route.__annotations__["params"] = Annotated[model, Query()]
    app.add_api_route("/", route)
    return app.openapi()["paths"]["/"]["get"]["parameters"]


#: How ``GET /videos`` orders the catalog: newest first, or by file name.
VIDEO_SORTS = ("date", "name")
#: Largest page of ``GET /videos``.
MAX_PAGE = 500


class LikeFields(BaseModel):
    """The form fields of ``POST /search/like`` beside the file."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    q: Caption | None = Field(None, description="Text to fuse with the example (optional).")
    k: int = Field(10, ge=1, le=MAX_K, description="Number of results.")
    t: float | None = Field(None, ge=0, le=MAX_SECONDS, description="Like the upload's moment at this many seconds "
                                                                    "(beyond it: 400).")
    sort: Literal[SORTS] = Field("relevance", description=SORT_TEXT)


class LikeQuery(LikeFields):
    """:class:`LikeFields` in the query string of ``POST /search/like``, as ``GET /search`` takes them; another query
    parameter is ignored, as on every route."""

    model_config = ConfigDict(extra="ignore", regex_engine="python-re")


class DuplicatesResponse(BaseModel):
    threshold: float
    groups: list[model_of(DuplicateGroup)] = Field(description="Largest first; in each, the longest file first.")


class LastSync(BaseModel):
    summary: str = Field(description="`3 added, 0 updated, 1 removed, 40 unchanged, 0 failed; 42 in DIR`.")
    failed: list[str] = Field(description="`failed: PATH: problem` per file or cue that failed.")
    warnings: list[str] = Field(description="`warning: PATH: what` per file indexed in part or without a picture "
                                "(truncated, a wrong declared duration, sound alone).")
    skipped: list[str] = Field(description="`skipped: PATH: why` per file of the folders that is not a photo, video "
                               "or audio format reelsearch reads.")
    at: float = Field(description="When it ended (Unix time).")
    whole: bool = Field(description="Whether it covered the whole folders (the first one, or after a deletion).")


class WatchStatus(BaseModel):
    state: Literal["starting", "indexing", "waiting", "idle"] = Field(
        description="starting: the first sync of the folders; indexing; waiting: files are still being copied; idle.")
    roots: list[str] = Field(description="The folders followed.")
    indexing: list[str] = Field(description="The files (or, for a whole sync, folders) being indexed now.")
    waiting: list[str] = Field(description="Files still changing (being copied): indexed once they stop.")
    last: LastSync | None = Field(description="The last sync, or null before the first one ends.")
    error: str | None = Field(description="Why the last sync failed (tried again shortly), or null.")


class Health(BaseModel):
    status: Literal["ok"]
    videos: int
    model: str
    mode: str
    stale: bool
    experts: list[str] = Field(description="The experts a search fuses by default: visual and the text cues stored.")
    watch: WatchStatus | None = Field(None, description="What `serve --watch` is indexing (absent without it).")


class Word(BaseModel):
    start: float
    end: float
    word: str


class Segment(BaseModel):
    cue: Literal["speech", "ocr"]
    start: float = Field(description="Seconds from the start of the video.")
    end: float
    text: str
    confidence: float = Field(description="In [0, 1].")
    box: list[float] = Field(None, min_length=4, max_length=4, description="OCR: x0, y0, x1, y1 as fractions of "
                             "the frame.")
    words: list[Word] = Field(None, description="Speech: each word's time.")


class CueStatus(BaseModel):
    status: Literal["done", "failed", "not extracted"]
    segments: int
    recipe: str | None = Field(description="The extractor and its settings.")
    error: str | None


class Transcript(BaseModel):
    id: str
    path: str
    name: str
    path_b64: str
    cues: dict[str, CueStatus] = Field(description="Per cue (speech, ocr): what the index holds.")
    segments: list[Segment] = Field(description="In time order.")


class FrameTime(BaseModel):
    index: int
    t: float


class VideoSummary(BaseModel):
    id: str
    path: str
    name: str
    path_b64: str
    kind: Literal["video", "image", "audio"]
    duration: float | None = Field(description="Seconds (null for a photo, or when unknown).")
    taken_at: float = Field(description="Seconds since the epoch (UTC): when it was taken (reelsearch.media.dates).")
    taken_from: Literal["exif", "container", "file"] = Field(description="Where `taken_at` comes from: the photo's "
                                                             "EXIF, the video's container, or the file's time.")
    thumbnail: str = Field(description="URL of its middle frame's thumbnail (add `size` for a larger one).")
    media: str = Field(description="URL of the file.")


class VideoInfo(VideoSummary):
    size: int
    n_frames: int
    sha256: str
    model_id: str
    frames: list[FrameTime]


class Folder(BaseModel):
    path: str = Field(description="A folder holding indexed files (display form); `folder=` takes it back.")
    videos: int = Field(description="How many indexed files it holds (not counting its subfolders').")


class VideoList(BaseModel):
    total: int = Field(description="How many videos pass `folder`.")
    offset: int
    limit: int
    sort: Literal[VIDEO_SORTS]
    videos: list[VideoSummary] = Field(description="This page of them, in `sort` order.")
    folders: list[Folder] = Field(description="Every folder of the catalog, by path.")


class CaptionScore(BaseModel):
    caption: str
    score: float


class AnnotateResponse(BaseModel):
    captions: list[CaptionScore] = Field(description="Best first.")


class AnnotateRequest(BaseModel):
    """The JSON form of /annotate: an indexed video (by id, path or path_b64; the first given wins) and captions."""

    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re", json_schema_extra={
        "anyOf": [{"required": ["id"]}, {"required": ["path"]}, {"required": ["path_b64"]}],
        "examples": [{"id": "1", "captions": ["a dog catches a frisbee", "someone slices an onion"]}]})

    id: Annotated[str, StringConstraints(pattern=ID_PATTERN)] = Field(None, description="A video's id.")
    path: Annotated[str, StringConstraints(min_length=1)] = Field(None, description="An indexed file's path.")
    path_b64: Annotated[str, StringConstraints(pattern=B64_PATTERN)] = Field(
        None, description="An indexed file's path as its bytes in base64 (the `path_b64` of a result).")
    captions: list[Caption] = Field(min_length=1, max_length=MAX_CAPTIONS)

    @model_validator(mode="after")
    def _one_video(self) -> AnnotateRequest:
        if self.id is None and self.path is None and self.path_b64 is None:
            raise ValueError("give the video's id, path or path_b64, or upload the file")
        return self


_DEFAULT_REASONS = {400: "the input cannot be used (e.g. an undecodable upload)", 404: "no such video or file",
                    415: "unsupported content type or file extension", 422: "invalid parameters or body"}


def error(description: str) -> dict:
    return {"model": Error, "description": description}


def ok(model: type[BaseModel], *codes: int, reasons: dict[int, str] | None = None) -> dict:
    """Declared responses: 200 with ``model`` plus the error codes (a JSON ``{"detail"}`` each), each described by
    ``reasons`` (when the route says when it answers that code) or in general."""
    reasons = {**_DEFAULT_REASONS, **(reasons or {})}
    return {200: {"model": model}, **{c: error(reasons[c]) for c in codes}}


def _binary(*types: str) -> dict:
    return {t: {"schema": {"type": "string", "format": "binary"}} for t in types}


def image_ok() -> dict:
    return {200: {"description": "The thumbnail.", "content": _binary("image/jpeg", "image/png")}}


def media_responses() -> dict:
    """What the media route answers: starlette's FileResponse semantics (RFC 9110 ranges)."""
    types = ("video/*", "image/*", "audio/*", "application/octet-stream")
    content_range = {"Content-Range": {"schema": {"type": "string"}, "description": "bytes a-b/size"}}
    return {
        200: {"description": "The whole file.", "content": _binary(*types)},
        206: {"description": "The requested range (several ranges: multipart/byteranges).",
              "content": _binary(*types, "multipart/byteranges"), "headers": content_range},
        400: {"description": "Malformed byte range.", "content": {"text/plain": {"schema": {"type": "string"}}}},
        404: error("no such video, or its file is gone"),
        422: error("invalid parameters"),
        416: {"description": "Range not satisfiable; Content-Range gives the size.",
              "content": {"text/plain": {"schema": {"type": "string"}}},
              "headers": {"Content-Range": {"schema": {"type": "string"}, "required": True,
                                            "description": "bytes */size"}}},
    }


def annotate_body() -> dict:
    """The request body of /annotate: JSON (an indexed video) or multipart (an uploaded file)."""
    caption = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NON_BLANK}
    return {"required": True, "content": {
        "application/json": {"schema": AnnotateRequest.model_json_schema()},
        "multipart/form-data": {
            "schema": {"type": "object", "required": ["file", "captions"], "additionalProperties": False,
                       "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": f"A video or image (an image/* or video/* part, or a name with a media "
                                        f"extension, else 415; at most {MAX_UPLOAD_BYTES >> 20} MiB, else 413). "
                                        "Content that cannot be decoded is 400."},
                "captions": {**caption, "description": "One caption per line (for longer lists, index the file "
                                                       "and send JSON)."}}},
            "encoding": {"file": {"contentType": "video/*, image/*"}}}}}


def like_body() -> dict:
    """The request body of /search/like: a multipart upload and the optional fields of :class:`LikeFields`."""
    caption = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NON_BLANK}
    fields = {"q": {**caption, "description": "Text to fuse with the example (optional)."},
              "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10,
                    "description": "Number of results."},
              "t": {"type": "number", "minimum": 0, "maximum": MAX_SECONDS,
                    "description": "Like the upload's moment at this many seconds (beyond its end: 400)."},
              "sort": {"type": "string", "enum": list(SORTS), "default": "relevance", "description": SORT_TEXT}}
    return {"required": True, "content": {"multipart/form-data": {
        "schema": {"type": "object", "required": ["file"], "additionalProperties": False,
                   "properties": {"file": {"type": "string", "format": "binary",
                                           "description": f"A video or image (an image/* or video/* part, or a name "
                                                          f"with a media extension, else 415; at most "
                                                          f"{MAX_UPLOAD_BYTES >> 20} MiB, else 413). Content that "
                                                          "cannot be decoded is 400."},
                                  **fields}},
        "encoding": {"file": {"contentType": "video/*, image/*"}}}}}
