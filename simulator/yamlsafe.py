"""YAML reading with a bound on alias expansion: a "billion laughs" document (anchors that each
repeat the previous one ten times) composes to a few dozen nodes but expands to 10^9 objects;
it is refused by its expanded size before anything is built."""

from __future__ import annotations

from typing import Any

import yaml

# Far above any real scenario, sweep or profile (a few hundred nodes; an inline empirical list
# of 100k lengths stays below it) and small enough to refuse in milliseconds.
MAX_EXPANDED_NODES = 1_000_000


class YAMLBombError(yaml.YAMLError):
    """Aliases that expand past MAX_EXPANDED_NODES, or refer to themselves."""


def _expanded_size(root: yaml.Node) -> int:
    """Node count with every alias expanded, computed once per distinct node (memoized) and
    iteratively, so deep or wide documents cost time linear in their composed size."""
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [part for pair in node.value for part in pair]
        if children_done:
            active.discard(key)
            size[key] = min(1 + sum(size[id(k)] for k in kids), MAX_EXPANDED_NODES + 1)
            continue
        if key in size:
            continue
        if key in active:
            raise YAMLBombError("an alias refers to the node that contains it (recursive YAML)")
        active.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
    total = size[id(root)]
    if total > MAX_EXPANDED_NODES:
        raise YAMLBombError(
            f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes (a 'billion laughs' "
            f"document); write the values out instead"
        )
    return total


# libyaml's parser (when PyYAML was built with it) composes a document ~10x faster than the
# pure-Python one; the constructor and resolver are the same Python classes in both, so a valid
# document loads to the same values. Errors are re-read with the pure-Python loader so every
# message (problem, line, column) is the same whichever parser is installed.
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", None)


def safe_load_bounded(text: str) -> Any:
    """`yaml.safe_load` that refuses alias bombs and recursive aliases (YAMLBombError)."""
    if _FAST_LOADER is not None:
        try:
            return _load(_FAST_LOADER, text)
        except yaml.YAMLError:
            pass  # the same document again below, for the pure-Python loader's message
    return _load(yaml.SafeLoader, text)


def _load(loader_class: Any, text: str) -> Any:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
