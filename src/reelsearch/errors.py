"""Errors that reach the user: each names the file (and line) and the problem."""

from __future__ import annotations

from pathlib import Path

#: Exit statuses of every command: 0 success, 2 bad input or usage (a ReelsearchError, or a wrong option), 3 partial
#: failure (some items failed and are reported; the rest were done).
EXIT_BAD_INPUT = 2
EXIT_PARTIAL_FAILURE = 3


class ReelsearchError(Exception):
    """Base class for every error reelsearch reports to a user (the CLI prints it, exit status 2)."""


class DataFormatError(ReelsearchError):
    """A data file is malformed: names the file, the line (1-based, when known) and the problem."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class MediaError(ReelsearchError):
    """A media file cannot be decoded or has no usable stream."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class NoVideoStream(MediaError):
    """A media file has no video stream (an audio file): nothing to see, its sound may still be indexed."""


class QueryError(ReelsearchError):
    """A query or caption list that cannot be used (empty, too long, k out of range)."""


#: What an empty (or blank) query is told, by a search and by ``encode_text`` alike.
EMPTY_QUERY = "the query is empty"


class ConfigError(ReelsearchError, ValueError):
    """A setting names something unknown or has an invalid value (e.g. a loss or similarity name)."""



class EvaluationInputError(ReelsearchError, ValueError):
    """Bad scores or ground truth given to the metrics or to a fusion.

    ``subject`` says which input is at fault: ``"positives"`` (the ground truth) or ``"scores"`` (the similarity
    matrix), so that a caller reading them from files can name the right file.
    """

    def __init__(self, problem: str, subject: str):
        self.problem = problem
        self.subject = subject
        super().__init__(problem)
