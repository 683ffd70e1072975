"""CUDA source as HTML with its tokens coloured: comments, keywords, types, numbers, built-ins.

The explorer shows each kernel's source; colouring the few token classes a reader scans for
(where the comments are, which names are CUDA's own) is enough, so one regular expression splits
the text and each piece is escaped and wrapped in `<span class="hl-...">` by what it is. Every
character of the source is escaped, so nothing in a kernel (or in a comment naming a user's file)
can become markup.
"""
from __future__ import annotations

import html
import re

KEYWORDS = frozenset(
    "if else for while do return break continue switch case default const static extern inline "
    "sizeof struct typedef template typename auto __restrict__ __global__ __device__ __shared__ "
    "__forceinline__ constexpr".split()
)
TYPES = frozenset("void float double int long unsigned short char bool size_t dim3 half __half __nv_bfloat16 "
                  "uint16_t uint32_t int32_t int64_t".split())
BUILTINS = frozenset("threadIdx blockIdx blockDim gridDim __syncthreads atomicAdd INFINITY NAN".split())

TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<preproc>^[ \t]*\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>\b(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[fFuUlL]*\b)
  | (?P<word>[A-Za-z_]\w*)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)


def _word_class(word: str) -> str | None:
    if word in KEYWORDS:
        return "hl-keyword"
    if word in TYPES:
        return "hl-type"
    if word in BUILTINS or word.startswith("rc_"):
        return "hl-builtin"
    return None


def highlight_cuda(source: str) -> str:
    """The source, HTML-escaped, with comments, preprocessor lines, strings, numbers, keywords,
    types and CUDA built-ins in spans of class hl-comment, hl-preproc, hl-string, hl-number,
    hl-keyword, hl-type and hl-builtin."""
    out, last = [], 0
    for m in TOKEN.finditer(source):
        out.append(html.escape(source[last:m.start()]))
        kind = m.lastgroup
        css = _word_class(m.group()) if kind == "word" else f"hl-{kind}"
        text = html.escape(m.group())
        out.append(f'<span class="{css}">{text}</span>' if css else text)
        last = m.end()
    out.append(html.escape(source[last:]))
    return "".join(out)
