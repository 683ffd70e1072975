"""Generator steps of windows: convolution (1-D and 3-D) and pooling, each window read through one
strided view. Mixed into `generator.Generator`, whose helpers (`pick`, `chance`, value intervals)
they use."""
from __future__ import annotations

import math


class WindowSteps:
    def step_window(self) -> None:
        """Convolution and pooling: windows read through one strided view."""
        if self.chance(0.45):
            return self.step_conv_nd()
        v = self.pick(lambda v: len(v.shape) == 4 and all(isinstance(d, int) for d in v.shape[1:]))
        if v is None or self.chance(0.3):
            shape = (
                self.choice([1, 2, "B"]),
                self.choice([1, 2, 3]),
                int(self.rng.integers(3, 8)),
                int(self.rng.integers(3, 8)),
            )
            v = self.new_input(shape)
        n = v.name
        _, c, h, w = v.shape
        op = self.choice(["conv", "conv", "max_pool", "avg_pool", "conv_transpose"])
        k = int(self.rng.integers(1, min(3, h, w) + 1))
        stride = self.choice([1, 1, 2])
        if op == "conv":
            cout = self.choice([1, 2, 3])
            pad = self.choice([0, 0, 1])
            wt = self.new_input((cout, c, k, k))
            bias = f", {self.new_input((cout,)).name}" if self.chance(0.5) else ""
            bound = c * k * k * v.bound * 2 + 2
            same = stride == 1 and pad == 1 and k == 2  # PyTorch's asymmetric "same" (one more at the end)
            padding = "'same'" if same else pad
            out = self.emit(
                f"rc.nn.conv2d({n}, {wt.name}{bias}, stride={stride}, padding={padding})",
                -bound,
                bound,
                False,
                "conv2d_same" if same else "conv2d",
            )
        elif op == "conv_transpose":
            cout, stride = self.choice([1, 2]), self.choice([1, 2])
            wt = self.new_input((c, cout, k, k))
            bound = c * k * k * v.bound * 2 + 2
            out = self.emit(
                f"rc.nn.conv_transpose2d({n}, {wt.name}, stride={stride})",
                -bound,
                bound,
                False,
                "conv_transpose2d",
            )
        elif op == "max_pool":
            pad = self.choice([0, k // 2])
            extra = f", dilation={self.choice([1, 1, 2])}, ceil_mode={self.chance(0.4)}"
            if self.chance(0.3):  # where each maximum lies: exact positions in the input plane
                out = self.emit(
                    f"rc.nn.max_pool2d({n}, {k}, stride={stride}, padding={pad}{extra}, "
                    f"return_indices=True)[1]",
                    0.0,
                    h * w,
                    True,
                    "max_pool_indices",
                )
            else:
                out = self.emit(
                    f"rc.nn.max_pool2d({n}, {k}, stride={stride}, padding={pad}{extra})",
                    v.lo,
                    v.hi,
                    v.exact,
                    "max_pool2d",
                )
        else:
            pad = self.choice([0, k // 2])
            extra = f", ceil_mode={self.chance(0.4)}, count_include_pad={self.chance(0.5)}"
            out = self.emit(
                f"rc.nn.avg_pool2d({n}, {k}, stride={stride}, padding={pad}{extra})",
                min(v.lo, 0.0),
                max(v.hi, 0.0),
                False,
                "avg_pool2d",
            )
        if out is not None:
            self.tame(out)

    def step_conv_nd(self) -> None:
        """rc.nn.conv over 1 spatial axis (its length may be symbolic) or 3, with groups, strides,
        dilations and (asymmetric) pads."""
        d = self.choice([1, 1, 3])
        groups = self.choice([1, 1, 2])
        c = groups * self.choice([1, 2, 5])  # 5 channels per group: one merged contraction (an implicit GEMM)
        if d == 1:
            v = self.pick(lambda v: len(v.shape) == 3 and v.shape[1] == c)
            if v is None or self.chance(0.4):
                v = self.new_input((self.choice([1, 2, "B"]), c, self.choice(["T", 5, 9, 12])))
        else:
            v = self.pick(
                lambda v: (
                    len(v.shape) == 5 and v.shape[1] == c and all(isinstance(n, int) for n in v.shape[2:])
                )
            )
            if v is None or self.chance(0.4):
                v = self.new_input(
                    (self.choice([1, "B"]), c) + tuple(int(self.rng.integers(2, 5)) for _ in range(3))
                )
        kernel = tuple(int(self.rng.integers(1, 4)) for _ in range(d))
        dilation = tuple(self.choice([1, 1, 2]) for _ in range(d))
        stride = tuple(self.choice([1, 1, 2]) for _ in range(d))
        # pads large enough that even a length of 1 holds a window; sometimes uneven (begin, end)
        need = [dl * (k - 1) for k, dl in zip(kernel, dilation)]
        pads = [((m + 1) // 2, (m + 1) // 2 + int(self.rng.integers(0, 2))) for m in need]
        cout = groups * self.choice([1, 2])
        wt = self.new_input((cout, c // groups) + kernel)
        bias = f", {self.new_input((cout,)).name}" if self.chance(0.5) else ", None"
        bound = (c // groups) * math.prod(kernel) * v.bound * 2 + 2
        fn = self.choice(["conv", f"conv{d}d"])
        padding = pads if fn == "conv" and self.chance(0.5) else [p for p, _ in pads]
        out = self.emit(
            f"rc.nn.{fn}({v.name}, {wt.name}{bias}, stride={stride!r}, padding={padding!r}, "
            f"dilation={dilation!r}, groups={groups})",
            -bound,
            bound,
            False,
            f"conv{d}d",
        )
        if out is not None:
            self.tame(out)
