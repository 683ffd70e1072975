"""The prefix cache: a radix tree over token ids whose nodes hold pages of the KV pool.

Pages are the unit of sharing (a sequence's block table names whole pages), so each edge of the
tree is one full page of token ids and each node holds that page (a `retain` on the pool). A new
request walks the tree along its prompt and adopts the pages of the longest match: it prefills only
the rest. Finished, preempted and running sequences insert their full pages; a page already in the
tree under the same tokens keeps the tree's copy. A node is evictable when it is a leaf and only the
tree holds its page; eviction takes the least recently used such leaf, so a prefix outlives the
branches that extend it.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

from .kv_cache import PagedKVPool


class _Node:
    __slots__ = ("key", "page", "parent", "children", "used")

    def __init__(self, key: tuple, page: Optional[int], parent: Optional["_Node"], used: int):
        self.key, self.page, self.parent, self.used = key, page, parent, used
        self.children: dict = {}


class PrefixCache:
    """Cached prefixes of `pool`'s sequences, page by page; `stats` counts hit tokens (adopted from the
    tree), prefilled tokens (reported by the scheduler) and evicted pages."""

    def __init__(self, pool: PagedKVPool):
        self.pool = pool
        self.root = _Node((), None, None, 0)
        self._clock = itertools.count(1)
        self.stats = {"hit_tokens": 0, "prefilled_tokens": 0, "evicted_pages": 0}

    @property
    def pages(self) -> int:
        """Pages the tree holds."""
        count, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            count += node.page is not None
            stack.extend(node.children.values())
        return count

    def _keys(self, tokens: Sequence[int], n_pages: int):
        size = self.pool.page_size
        return [tuple(tokens[i * size:(i + 1) * size]) for i in range(n_pages)]

    def match(self, tokens: Sequence[int], limit: int) -> list:
        """The pages of the longest cached prefix of `tokens` no longer than `limit` tokens, marked
        as used now (the caller adopts them before anything is evicted)."""
        node, pages, now = self.root, [], next(self._clock)
        for key in self._keys(tokens, limit // self.pool.page_size):
            node = node.children.get(key)
            if node is None:
                break
            node.used = now
            pages.append(node.page)
        return pages

    def insert(self, tokens: Sequence[int], pages: Sequence[int]) -> None:
        """Cache the full pages of a sequence: `pages[i]` holds tokens[i * page_size: (i+1) * page_size]."""
        node, now = self.root, next(self._clock)
        for key, page in zip(self._keys(tokens, len(tokens) // self.pool.page_size), pages):
            child = node.children.get(key)
            if child is None:
                self.pool.retain([page])
                child = node.children[key] = _Node(key, page, node, now)
            child.used = now
            node = child

    def evict(self, n_pages: int) -> int:
        """Free up to `n_pages` pages, least recently used unshared leaves first; returns how many."""
        leaves = [n for n in self._nodes() if not n.children and self.pool.holders(n.page) == 1]
        freed = 0
        while freed < n_pages and leaves:
            leaf = min(leaves, key=lambda n: n.used)
            leaves.remove(leaf)
            del leaf.parent.children[leaf.key]
            self.pool.release([leaf.page])
            freed += 1
            parent = leaf.parent
            if parent is not self.root and not parent.children and self.pool.holders(parent.page) == 1:
                leaves.append(parent)
        self.stats["evicted_pages"] += freed
        return freed

    def clear(self) -> None:
        """Drop every node (pages still held by sequences stay theirs)."""
        for node in self._nodes():
            self.pool.release([node.page])
        self.root.children = {}

    def _nodes(self) -> list:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
