"""Automatic prefix caching: KV blocks kept by content after their request lets go, found
again by a later prompt that starts with the same tokens, evicted least recently used when the
KV pool needs the room.

Content. A prompt is a sequence of named segments (workload/content.py); a segment id fixes
every segment before it, so the tokens up to any position are fixed by the segment holding the
position and the position itself. A full block of `block_size` tokens is therefore named by
(segment of its last token, block index): two requests with the same name hold the same tokens
in that block and everything before it, as vLLM's chained block hashes say (v1
`hash_block_tokens` over the parent hash and the block's tokens).

Blocks. A block is held (referenced by running requests; shared, never copied) or idle
(cached, referenced by none, reusable). Idle blocks count as free KV: a new allocation takes a
never-cached free block first and evicts the least recently used idle block only when none is
left (SGLang's radix cache evicts on demand; vLLM's one free queue may evict earlier, see
docs/sessions.md). The scheduler keeps `free_blocks` (empty + idle) and calls `trim` after
every allocation, which keeps idle <= free_blocks. A request looks up only full blocks of its
prompt short of its last token: at least one token is computed to sample from (vLLM v1
`get_computed_blocks` caps the hit at prompt - 1 tokens).

Host tier (deployment.kv_offload): a block evicted from the GPU is kept in host memory, least
recently used first out when that fills; a prompt that finds blocks there loads them into new
GPU blocks, the load (blocks x bytes / host link) on the time of the step that admits it. The
host keeps its copy.

Release order follows vLLM's free queue: a finished request's blocks go idle last block first,
so its tail is evicted before its head (the head is what the next prompt shares).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from simulator.workload.content import Content

if TYPE_CHECKING:
    from simulator.serving.request import Request

KEY_STRIDE = 1 << 32  # block index bits of a block name: segment id * stride + block index


def block_names(segments: Iterable[tuple[int, int]], block_size: int, tokens: int) -> list[int]:
    """Names of the full blocks among the first `tokens` tokens of `segments`: block b is
    named by the segment holding its last token, (b + 1) x block_size - 1."""
    names: list[int] = []
    blocks = tokens // block_size
    end = 0
    b = 0
    for seg, length in segments:
        end += length
        last = min(end // block_size, blocks)  # blocks whose last token lies before `end`
        if last > b:
            base = seg * KEY_STRIDE
            names.extend(range(base + b, base + last))
            b = last
        if b >= blocks:
            break
    return names


def prompt_names(content: Content, block_size: int, prompt_tokens: int) -> list[int]:
    """The blocks a prompt may find cached: its full blocks short of its last token."""
    return block_names(content.segments[:content.prompt_segments], block_size, prompt_tokens - 1)


def sequence_names(content: Content, block_size: int, prompt_tokens: int,
                   output_tokens: int) -> list[int]:
    """The full blocks of a finished request's KV: prompt and answer but the last token of
    the answer, whose KV is never written."""
    segs = (*content.segments[:content.prompt_segments], (content.output_id, output_tokens))
    return block_names(segs, block_size, prompt_tokens + output_tokens - 1)


def cached_prefix(cache: PrefixCache, r: Request, block_size: int) -> tuple[int, int, int]:
    """(prompt tokens of waiting request `r` found in `cache`, how many of those blocks are
    idle on the GPU, how many must be loaded from the host tier): 0 for a request without
    content or whose KV arrived from a prefill replica. Its block names are worked out on the
    first look and kept; so is the answer, until the cache changes (a waiting request is
    looked up at every step that tries to admit it)."""
    if r.content is None or r.computed:
        return 0, 0, 0
    memo = r.hit_memo
    if memo is not None and memo[0] is cache and memo[1] == cache.version:
        return memo[2]
    names = r.names
    if names is None:
        names = r.names = prompt_names(r.content, block_size, r.input_tokens)
    hit, idle, load = cache.hits(names)
    found = (hit * block_size, idle, load)
    r.hit_memo = (cache, cache.version, found)
    return found


class PrefixCache:
    """The cached blocks of one KV pool (a replica, an attention-DP rank): reference counts by
    block name, the idle ones in least-recently-used order; with a host tier of
    `offload_blocks`, the blocks evicted from the GPU, least recently used first out."""

    def __init__(self, offload_blocks: int = 0) -> None:
        self.refs: dict[int, int] = {}  # name -> requests holding it (0: idle)
        self.idle: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.evicted_blocks = 0
        self.offload_capacity = offload_blocks
        self.host: OrderedDict[int, None] = OrderedDict()  # host tier, oldest first
        self.offloaded_blocks = 0  # blocks written to the host tier
        self.reloaded_blocks = 0  # blocks loaded back from it
        self.dropped_blocks = 0  # blocks the host tier let go for room
        self.version = 0  # counts the changes to what `hits` answers (look-ups memoize on it)

    def hits(self, names: Sequence[int]) -> tuple[int, int, int]:
        """(leading blocks of `names` that are cached on the GPU or the host, how many of
        those are idle on the GPU, how many must be loaded from the host)."""
        refs, host = self.refs, self.host
        hit = idle = load = 0
        for name in names:
            held = refs.get(name)
            if held is None:
                if name not in host:
                    break
                load += 1
            elif held == 0:
                idle += 1
            hit += 1
        return hit, idle, load

    def acquire(self, names: Sequence[int]) -> None:
        """A request takes cached blocks (found by `hits`) into its KV; those only on the host
        are loaded into new GPU blocks it holds."""
        refs, idle, host = self.refs, self.idle, self.host
        self.version += 1
        for name in names:
            held = refs.get(name)
            if held is None:  # on the host: loaded back (the host keeps its copy)
                host.move_to_end(name)
                self.reloaded_blocks += 1
                refs[name] = 1
                continue
            if held == 0:
                del idle[name]
            refs[name] = held + 1

    def register(self, names: Sequence[int]) -> list[int]:
        """A request computed these blocks: cache those no other request holds under the same
        name (a duplicate computed beside another stays the request's own). Returns the names
        it now holds a reference to."""
        refs = self.refs
        fresh = [name for name in names if name not in refs]
        for name in fresh:
            refs[name] = 1
        if fresh:
            self.version += 1
        return fresh

    def release(self, held: Sequence[int], kept: Sequence[int] = ()) -> int:
        """A request lets go of the blocks it references (`held`); a finished one also leaves
        its own full blocks cached (`kept`: its prompt and answer, named in order, `held`
        among them), where no cached block has their name. Last block first, as vLLM frees
        them, so the tail is evicted before the head the next prompt shares. Returns how many
        of `held` other requests still hold (not free)."""
        refs, idle = self.refs, self.idle
        self.version += 1
        shared = 0
        mine = set(held)
        # A finished request's `held` blocks are among its `kept` ones (its prompt's blocks
        # are its sequence's first), so one walk in `kept`'s order serves; a preempted one
        # keeps nothing and walks `held`. (One reference less to a name: it stays held by
        # others, or goes idle; inlined, as a session's history is thousands of blocks
        # released every turn.)
        for name in reversed(kept if kept else held):
            if name in mine:
                count = refs[name] - 1
                refs[name] = count
                if count:
                    shared += 1
                else:
                    idle[name] = None
            elif name not in refs:
                refs[name] = 0  # the request's own block, already counted free
                idle[name] = None
        return shared

    def trim(self, free_blocks: int) -> None:
        """Evict the least recently used idle blocks until the idle ones fit in the free
        blocks (an allocation took the room they held)."""
        idle, refs = self.idle, self.refs
        if len(idle) > free_blocks:
            self.version += 1
        while len(idle) > free_blocks:
            name, _ = idle.popitem(last=False)
            del refs[name]
            self.evicted_blocks += 1
            if self.offload_capacity:
                self._offload(name)

    def _offload(self, name: int) -> None:
        """An evicted block goes to the host tier (if not there already), the tier's least
        recently used block out when it is full."""
        host = self.host
        if name in host:
            host.move_to_end(name)
            return
        host[name] = None
        self.offloaded_blocks += 1
        if len(host) > self.offload_capacity:
            host.popitem(last=False)
            self.dropped_blocks += 1
