"""How the emulator runs each kernel: plain threads, barrier-free regions, or fibers.

refcomp's templates mark every barrier-free stretch of a barrier kernel with `RC_FOR_EACH_THREAD
{ ... }` (an empty macro on a GPU, so each thread runs it once; a loop over the block's threads in
emu_shim.h). Such a kernel runs once per block, region after region, and `__syncthreads()` between
two regions costs nothing. The split is only sound if the code outside the regions is the same for
every thread and every barrier is reached by all of them, so the source is checked before it runs:

- no `__syncthreads()` inside a region: there it would sit in per-thread (possibly divergent)
  control flow, which CUDA forbids; the kernel is refused with a RefcompError naming it;
- no `return` inside a region (it would end the whole block): a thread's work in a region ends at
  its closing brace;
- no `threadIdx` outside the regions (code there runs once per block, so it must not depend on it).

A kernel without the markers that calls `__syncthreads()` (hand-written CUDA) runs on fibers.
"""
from __future__ import annotations

import functools
import re
from typing import Sequence

from refcomp.errors import RefcompError
from ..codegen.abi import KernelSignature

THREADS, REGIONS, FIBERS = "threads", "regions", "fibers"
MODE_CODES = {THREADS: 0, REGIONS: 1, FIBERS: 2}  # the shim's EMU_THREADS, EMU_REGIONS, EMU_FIBERS
_MARK = "RC_FOR_EACH_THREAD"
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"", re.DOTALL)


def _blank(match: re.Match) -> str:
    """A comment or string literal as spaces (newlines kept), so offsets and line numbers stay."""
    return re.sub(r"[^\n]", " ", match.group(0))


_BRACES = re.compile(r"[{}]")


def _closing(text: str, open_at: int) -> int:
    """Index of the brace that closes the one at `open_at`."""
    depth = 0
    for brace in _BRACES.finditer(text, open_at):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return brace.start()
    raise RefcompError("unbalanced braces in the kernel source")


def _bodies(code: str) -> dict[str, tuple[int, int]]:
    """Each kernel's name -> the offsets of its body's braces, in one pass over the source."""
    spans = {}
    for found in re.finditer(r"__global__\s+void\s+(\w+)\s*\(", code):
        start = code.find("{", found.end())
        if start >= 0:
            spans[found.group(1)] = (start, _closing(code, start))
    return spans


def _regions(code: str, lo: int, hi: int, name: str, line_of) -> list[tuple[int, int]]:
    spans, at = [], lo
    while (found := re.compile(rf"\b{_MARK}\b").search(code, at, hi)) is not None:
        brace = re.compile(r"\s*\{").match(code, found.end())
        if brace is None:
            raise RefcompError(f"kernel {name}: {_MARK} on line {line_of(found.start())} must be followed "
                               "by a braced block")
        open_at = brace.end() - 1
        spans.append((open_at, _closing(code, open_at)))
        at = spans[-1][1]
    return spans


def kernel_mode(code: str, spans: dict[str, tuple[int, int]], sig: KernelSignature) -> str:
    """THREADS, REGIONS or FIBERS for one kernel of `code` (the source with comments blanked; `spans`
    from _bodies); a region kernel that breaks the rules above raises RefcompError naming the kernel
    and the line."""
    span = spans.get(sig.name)
    if span is None or not re.compile(rf"\b{_MARK}\b").search(code, span[0], span[1]):
        return FIBERS if sig.uses_barrier else THREADS

    def line_of(offset: int) -> int:
        return code.count("\n", 0, offset) + 1

    regions = _regions(code, span[0], span[1], sig.name, line_of)
    for lo, hi in regions:
        for word, why in (("__syncthreads", "a barrier in divergent control flow: not every thread of the "
                           "block is sure to reach it, which CUDA forbids"),
                          ("return", "it would end the whole block's region loop")):
            hit = re.compile(rf"\b{word}\b").search(code, lo, hi)
            if hit:
                raise RefcompError(f"kernel {sig.name}: {word} on line {line_of(hit.start())} is inside a "
                                   f"{_MARK} region ({why})")
    outside, at = [], span[0]
    for lo, hi in regions:
        outside.append((at, lo))
        at = hi
    outside.append((at, span[1]))
    for lo, hi in outside:
        hit = re.compile(r"\bthreadIdx\b").search(code, lo, hi)
        if hit:
            raise RefcompError(
                f"kernel {sig.name}: threadIdx on line {line_of(hit.start())} is outside every "
                f"{_MARK} region, where code must be the same for every thread of the block"
            )
    return REGIONS


@functools.lru_cache(maxsize=4)
def _parsed(source: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """The source with comments and strings blanked, and its kernels' body spans: read once for the
    modes and the repeated definitions of one load."""
    code = _COMMENTS.sub(_blank, source)
    return code, _bodies(code)


def kernel_modes(source: str, kernels: Sequence[KernelSignature]) -> dict[str, str]:
    code, spans = _parsed(source)
    return {k.name: kernel_mode(code, spans, k) for k in kernels}


_DEFINITION = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def repeated_kernels(source: str, kernels: Sequence[KernelSignature]) -> tuple[str, dict[str, str]]:
    """(`source` without the kernel definitions that repeat an earlier one's, each kernel's name ->
    the kernel whose definition it runs). A deep model's program repeats its layer's kernels, which
    differ only in their names and comments (GPT-2 small's decode step: 45 distinct of 198); g++
    need compile each once. A definition with a string literal is always kept."""
    code, bodies = _parsed(source)
    # found in the source (the blanked code has no "C"), outside comments (there the code is blank)
    heads = {m.group(1): m.start() for m in _DEFINITION.finditer(source) if code[m.start()] != " "}
    first: dict = {}
    runs, cuts = {}, []
    for k in kernels:
        runs[k.name] = k.name
        if k.name not in heads or k.name not in bodies:
            continue
        start, end = heads[k.name], bodies[k.name][1] + 1
        if '"' in source[start:end].replace('extern "C"', "", 1):
            continue  # without string literals, the blanked code is the source less its comments
        plain = " ".join(re.sub(rf"\b{k.name}\b", "KERNEL", code[start:end]).split())
        key = (tuple(p.ctype for p in k.params), k.uses_barrier, plain)
        if key in first:
            runs[k.name] = first[key]
            cuts.append((start, end))
        else:
            first[key] = k.name
    pieces, at = [], 0
    for start, end in sorted(cuts):
        name = _DEFINITION.match(source, start).group(1)
        pieces.append(source[at:start] + f"/* {name}: the same definition as {runs[name]} */")
        at = end
    return "".join(pieces) + source[at:], runs
