"""Filling a library: the folder or catalog a command works on and the model it remembers, indexing a folder's
media (``index_paths``: the one sync, ``Searcher.index``, and the text cues), cooperating workers as Ray tasks, and
watch mode, which keeps a library in line with folders as files come and go.

It runs on a ``reelsearch.search.Searcher`` (one model and one library, the one that ``serve --watch`` shares with
search), so it sits one layer above ``reelsearch.search`` (docs/architecture.md).
"""
