"""The profile build's rewrite of a program's CUDA source (a copy: the normal build never sees it).

Every `float` becomes `rcp_f32` (a float whose arithmetic and math calls count themselves), each
kernel's buffer parameters and `__shared__` arrays become recording wrappers, and each place the
kernel body indexes one of them gets a site number (`in0[i]` -> `in0(3)[i]`); masked loads and
guarded blocks are marked so that threads which skip them still count an execution (see
emu_profile.h for the counting rules, and exec.profile for the runner).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..codegen.abi import KernelSignature
from ..errors import RefcompError
from ..ops.dtypes import DTYPES


class ProfileError(RefcompError):
    """The profile build could not be made or run: names the kernel (or the file) at fault."""


# --- the rewrite ----------------------------------------------------------------------------------
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{')
_POINTER = re.compile(r"^\s*(const\s+)?(rcp_f32|int|unsigned short|long long|double)\s*\*\s*"
                      r"(?:__restrict__\s+)?(\w+)\s*$")
_SHARED = re.compile(r"__shared__\s+(rcp_f32|long long|double)\s+(\w+)\s*((?:\[[^\]\[]+\]\s*)+);")
# float literals (1.0f, 1.4426950216293335f, 1e-05f) and INFINITY, NAN: made rcp_f32 so that
# `c ? in0[i] : 0.0f` has one type (a proxy converts to rcp_f32, never to float)
_FLOAT_LITERAL = re.compile(
    r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)[fF]\b|\b(INFINITY|NAN)\b"
)


@dataclass(frozen=True)
class Instrumented:
    source: str                     # the rewritten translation unit (without the header)
    sites: dict[str, int]           # kernel -> number of indexing sites
    site_names: dict[str, list[str]]  # kernel -> the buffer or array each site indexes


def _body_end(text: str, start: int, kernel: str) -> int:
    """Index just past the `}` closing the `{` at text[start - 1] (skips comments and literals)."""
    depth, i, n = 1, start, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i)
            i = n if i < 0 else i + 2
            continue
        if ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ProfileError(
        f"kernel {kernel}: cannot find the end of its body, so the profile build cannot instrument it"
    )


def _params(kernel: str, params: str) -> tuple[str, list[str]]:
    out, buffers = [], []
    for param in (p for p in params.split(",") if p.strip()):
        found = _POINTER.match(param)
        if found:
            const, elem, ident = found.groups()
            elem = "float" if elem == "rcp_f32" else elem
            out.append(f"rcp_gptr<{'const ' if const else ''}{elem}> {ident}")
            buffers.append(ident)
        elif re.match(r"^\s*unsigned int\s*\*", param):  # a split kernel's tickets: atomics only, which
            out.append(param.strip())  # Nsight counts apart from loads and stores (so neither counts them)
        elif "*" in param:
            raise ProfileError(
                f"kernel {kernel}: the profile build cannot instrument parameter {param.strip()!r}"
            )
        else:
            out.append(param.strip())
    return ", ".join(out), buffers


def _shared(kernel: str, body: str) -> tuple[str, list[str]]:
    arrays = []

    def replace(m: re.Match) -> str:
        elem, name = ("float" if m.group(1) == "rcp_f32" else m.group(1)), m.group(2)
        dims = [d.strip() for d in re.findall(r"\[([^\]\[]+)\]", m.group(3))]
        arrays.append(name)
        if len(dims) == 1:
            return f"__shared__ rcp_smem<{elem}, ({dims[0]})> {name};"
        if len(dims) == 2:
            return f"__shared__ rcp_smem2<{elem}, ({dims[0]}), ({dims[1]})> {name};"
        raise ProfileError(f"kernel {kernel}: the profile build handles 1-D and 2-D __shared__ arrays, "
                           f"not {name}{m.group(3)}")

    body = _SHARED.sub(replace, body)
    if re.search(r"__shared__\s+(?!rcp_smem)", body):
        raise ProfileError(f"kernel {kernel}: the profile build handles __shared__ float, double and "
                           f"long long arrays only")
    return body, arrays


def _condition_start(body: str, question: int) -> int:
    """Where the condition of the `?` at `question` begins: after the unmatched `(`, or after the
    `=`, `,`, `;` or `{` that precedes it at the same depth."""
    depth = 0
    for i in range(question - 1, -1, -1):
        ch = body[i]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            if depth == 0:
                return i + 1
            depth -= 1
        elif depth == 0 and ch in ",;{?:":
            return i + 1
        elif depth == 0 and ch == "=" and body[i - 1] not in "=!<>" and body[i + 1] != "=":
            return i + 1
    return 0


# The loads of 16-bit storage convert the element to float (DTYPES[...].c_load): `rc_half_to_float(in0[i])`.
CONVERSIONS = sorted({t.c_load.split("{0}")[0] for t in DTYPES.values()} - {""})


def _predicate_masked_loads(body: str, names: Sequence[str]) -> str:
    """`c ? in0(7)[i] : 0.0f` -> `rcp_pred(c, 7) ? in0(7)[i] : 0.0f` (see rcp_pred in emu_profile.h); a
    16-bit load is the same under its conversion: `c ? rc_half_to_float(in0(7)[i]) : 0.0f`."""
    loads = list(re.finditer(r"\?\s*(?:" + "|".join(map(re.escape, CONVERSIONS)) + r")?\s*("
                             + "|".join(map(re.escape, names)) + r")\((\d+)\)\[", body))
    for m in reversed(loads):  # from the end, so earlier positions stay valid
        start = _condition_start(body, m.start())
        condition = body[start:m.start()]
        lead = len(condition) - len(condition.lstrip())
        body = (body[:start + lead] + f"rcp_pred({condition.strip()}, {m.group(2)}) " + body[m.start():])
    return body


def _closing(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at text[open_at] (generated code: no brackets in literals)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == text[open_at]:
            depth += 1
        elif text[i] == pairs[text[open_at]]:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _predicate_if_blocks(body: str) -> str:
    """`if (c) { ...sites 7, 8... }` -> `if (rcp_skip(c, 7, 8)) { ... }` for a block without loops,
    barriers or `else` (see rcp_skip in emu_profile.h)."""
    edits = []
    for m in re.finditer(r"\bif\s*\(", body):
        close = _closing(body, m.end() - 1)
        brace = re.compile(r"\s*\{").match(body, close + 1) if close > 0 else None
        if brace is None:
            continue
        end = _closing(body, brace.end() - 1)
        block = body[brace.end():end]
        sites = re.findall(r"\w\((\d+)\)\[", block)
        if end < 0 or not sites or re.search(r"\b(for|while|do|__syncthreads)\b", block) \
                or re.match(r"\s*else\b", body[end + 1:]):
            continue
        edits.append((m.end(), close, ", ".join(dict.fromkeys(sites))))
    for start, close, sites in reversed(edits):  # from the end, so earlier positions stay valid
        body = f"{body[:start]}rcp_skip({body[start:close]}, {sites}){body[close:]}"
    return body


def instrument(source: str, kernels: Sequence[KernelSignature]) -> Instrumented:
    """The profile build's copy of `source` (see the module docstring); the original is untouched."""
    text = re.sub(r"\bfloat\b", "rcp_f32", source)
    text = _FLOAT_LITERAL.sub(lambda m: f"rcp_f32({m.group(0)})", text)
    pieces, pos = [], 0
    sites: dict[str, int] = {}
    site_names: dict[str, list[str]] = {}
    for m in _KERNEL.finditer(text):
        if m.start() < pos:
            continue
        name = m.group(1)
        params, buffers = _params(name, m.group(2))
        end = _body_end(text, m.end(), name)
        body, arrays = _shared(name, text[m.end():end])
        names: list[str] = []
        if buffers or arrays:
            pattern = re.compile(r"\b(" + "|".join(map(re.escape, buffers + arrays)) + r")\s*\[")

            def number(found: re.Match) -> str:
                names.append(found.group(1))
                return f"{found.group(1)}({len(names) - 1})["

            body = _predicate_if_blocks(_predicate_masked_loads(pattern.sub(number, body), buffers + arrays))
        leftover = re.search(r"\brcp_f32\s*\*", body)
        if leftover:
            line = text.count("\n", 0, m.end() + leftover.start()) + 1
            raise ProfileError(f"kernel {name}: the profile build cannot follow a float pointer other than a "
                               f"parameter (line {line} of the source)")
        pieces += [text[pos:m.start()], f'extern "C" __global__ void {name}({params}) {{', body]
        sites[name], site_names[name] = len(names), names
        pos = end
    pieces.append(text[pos:])
    missing = [k.name for k in kernels if k.name not in sites]
    if missing:
        raise ProfileError(
            f"kernel {missing[0]}: no `extern \"C\" __global__` definition the profile build can read"
        )
    return Instrumented("".join(pieces), sites, site_names)
