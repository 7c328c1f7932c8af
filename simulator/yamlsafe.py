"""YAML reading with the document's expanded size bounded and duplicate keys refused.

A "billion laughs" document (anchors that each repeat the previous one ten times) composes to a
few dozen nodes but expands to 10^9 objects; a long string repeated through aliases expands to
gigabytes of text in a few hundred nodes. Both are refused by their expanded size (nodes, and
characters of every scalar reachable) before anything is built. A key written twice in one
mapping (a second `deployment:` that silently replaced the first) is refused with its line.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# Far above any real scenario, sweep or profile (a few hundred nodes; an inline empirical list
# of 100k lengths stays below it) and small enough to refuse in milliseconds.
MAX_EXPANDED_NODES = 1_000_000
# Characters of all scalars with aliases expanded: ~50x the inline list above.
MAX_EXPANDED_CHARS = 32_000_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLBombError(yaml.YAMLError):
    """Aliases that expand past MAX_EXPANDED_NODES or MAX_EXPANDED_CHARS, or refer to
    themselves."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that holds the same key twice."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _expanded_size(root: yaml.Node) -> int:
    """Node count with every alias expanded, computed once per distinct node (memoized) and
    iteratively, so deep or wide documents cost time linear in their composed size; the
    characters of every scalar are counted the same way. Duplicate keys are checked on the
    way (each mapping once)."""
    size: dict[int, tuple[int, int]] = {}  # node -> (nodes, characters), both capped
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        kids = _children(node)
        if children_done:
            active.discard(key)
            nodes = 1 + sum(size[id(k)][0] for k in kids)
            chars = (len(node.value) if isinstance(node, yaml.ScalarNode)
                     else sum(size[id(k)][1] for k in kids))
            size[key] = (min(nodes, MAX_EXPANDED_NODES + 1), min(chars, MAX_EXPANDED_CHARS + 1))
            continue
        if key in size:
            continue
        if key in active:
            raise YAMLBombError("an alias refers to the node that contains it (recursive YAML)")
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(node)
        active.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
    nodes, chars = size[id(root)]
    if nodes > MAX_EXPANDED_NODES:
        raise YAMLBombError(
            f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes (a 'billion laughs' "
            f"document); write the values out instead"
        )
    if chars > MAX_EXPANDED_CHARS:
        raise YAMLBombError(
            f"the document expands to more than {MAX_EXPANDED_CHARS:,} characters (aliases "
            f"repeating long values, a 'billion laughs' document); write the values out instead"
        )
    return nodes


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """Refuse a scalar key that appears twice in one mapping (`<<` merges may repeat)."""
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        ident = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if ident in seen:
            shown = key_node.value if len(key_node.value) <= 60 else key_node.value[:60] + "..."
            raise DuplicateKeyError(
                f"key {shown!r} appears twice in one mapping (line {seen[ident]} and line "
                f"{line}); the second would silently replace the first: keep one"
            )
        seen[ident] = line


# libyaml's parser (when PyYAML was built with it) composes a document ~10x faster than the
# pure-Python one; the constructor and resolver are the same Python classes in both, so a valid
# document loads to the same values. Errors are re-read with the pure-Python loader so every
# message (problem, line, column) is the same whichever parser is installed.
# YAML 1.1 (PyYAML) reads `1e3` and `1e-3` (no dot) as strings, YAML 1.2 as numbers; the
# schemas take no string for a number, so these read as the floats everyone means.
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _with_exponent_floats(base: Any) -> Any:
    """A subclass of the loader `base` whose resolver also reads `1e3` as a float."""
    loader: Any = type(f"Frontier{base.__name__}", (base,), {})
    loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT,
                                 list("-+0123456789"))
    return loader


_SAFE_LOADER: Any = _with_exponent_floats(yaml.SafeLoader)
_FAST_LOADER: Any = (_with_exponent_floats(yaml.CSafeLoader) if hasattr(yaml, "CSafeLoader")
                     else None)


def safe_load_bounded(text: str) -> Any:
    """`yaml.safe_load` that refuses alias bombs and recursive aliases (YAMLBombError) and
    duplicate keys (DuplicateKeyError)."""
    if _FAST_LOADER is not None:
        try:
            return _load(_FAST_LOADER, text)
        except yaml.YAMLError:
            pass  # the same document again below, for the pure-Python loader's message
    return _load(_SAFE_LOADER, text)


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
