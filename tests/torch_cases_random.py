"""Torch-comparison cases (tests/torch_registry.py) of the random draws, called the PyTorch way. A draw's
values are refcomp's own stream, so each case compares what PyTorch fixes whatever the stream: shapes,
dtypes, ranges (floor of a uniform is 0), degenerate distributions (p in {0, 1}, one-hot weights, a
zero std, a one-integer range), seeds read back. The distributions themselves: tests/test_random.py."""
import refcomp as rc
from api_helpers import torch
from torch_registry import a, case

X = a(3, 4)
COINS = a(3, 4, lo=0, hi=1, values=(0.0, 1.0, 1.0, 0.0) * 3)
ONE_HOT = a(3, 5, lo=0, hi=1, values=(0, 0, 3, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0.5))
TWO_OF = a(2, 4, lo=0, hi=1, values=(0, 1, 0, 2, 5, 0, 1, 0))


def drawn(key, ours, theirs, *inputs, dims=None):
    case(key, ours, theirs, *inputs, exact=True, dims=dims or {})


drawn("rc.rand", lambda: rc.rand(3, 4).floor(), lambda: torch.rand(3, 4).floor())
drawn(
    "rc.rand",
    lambda: rc.rand((2, 3), dtype=rc.float16).floor(),
    lambda: torch.rand((2, 3), dtype=torch.float16).floor(),
)
drawn("rc.rand", lambda: rc.rand("B", 2).floor(), lambda: torch.rand(5, 2).floor(), dims={"B": 5})
drawn("rc.randn", lambda: rc.randn(4, 5).isfinite(), lambda: torch.randn(4, 5).isfinite())
drawn(
    "rc.randn",
    lambda: rc.randn(3, dtype=rc.bfloat16).isfinite(),
    lambda: torch.randn(3, dtype=torch.bfloat16).isfinite(),
)
drawn("rc.randint", lambda: rc.randint(4, 5, (3,)), lambda: torch.randint(4, 5, (3,)))
drawn("rc.randint", lambda: rc.randint(1, (2, 2)), lambda: torch.randint(1, (2, 2)))
drawn("rc.randint", lambda: rc.randint(-2, -1, size=(2,), dtype=rc.float16),
      lambda: torch.randint(-2, -1, size=(2,), dtype=torch.float16))
drawn("rc.rand_like", lambda x: rc.rand_like(x).floor(), lambda t: torch.rand_like(t).floor(), X)
drawn(
    "rc.rand_like",
    lambda x: rc.rand_like(x, dtype=rc.float16).floor(),
    lambda t: torch.rand_like(t, dtype=torch.float16).floor(),
    X,
)
drawn(
    "rc.randn_like",
    lambda x: rc.randn_like(x.half()).isfinite(),
    lambda t: torch.randn_like(t.half()).isfinite(),
    X,
)
drawn("rc.randint_like", lambda x: rc.randint_like(x, 7, 8), lambda t: torch.randint_like(t, 7, 8), X)
drawn("rc.randint_like", lambda x: rc.randint_like(x, 1), lambda t: torch.randint_like(t, 1), X)
drawn("rc.normal", lambda x: rc.normal(x, 0.0), lambda t: torch.normal(t, 0.0), X)
drawn("rc.normal", lambda x: rc.normal(2.0, x * 0.0), lambda t: torch.normal(2.0, t * 0.0), X)
drawn("rc.normal", lambda: rc.normal(2.0, 0.0, (3,)), lambda: torch.normal(2.0, 0.0, (3,)))
drawn("rc.bernoulli", lambda p: rc.bernoulli(p), lambda p: torch.bernoulli(p), COINS)
drawn("rc.bernoulli", lambda x: rc.bernoulli(x, 1.0), lambda t: torch.bernoulli(t, 1.0), X)
drawn("Tensor.bernoulli", lambda p: p.bernoulli(), lambda p: p.bernoulli(), COINS)
drawn("Tensor.bernoulli", lambda x: x.bernoulli(0.0), lambda t: t.bernoulli(0.0), X)
drawn("rc.multinomial", lambda w: rc.multinomial(w, 1), lambda w: torch.multinomial(w, 1), ONE_HOT)
drawn(
    "rc.multinomial", lambda w: rc.multinomial(w, 3, True), lambda w: torch.multinomial(w, 3, True), ONE_HOT
)
drawn(
    "Tensor.multinomial",
    lambda w: w.multinomial(2).sort(-1)[0],
    lambda w: w.multinomial(2).sort(-1)[0],
    TWO_OF,
)
drawn(
    "Tensor.multinomial",
    lambda w: w[1].multinomial(4, replacement=True),
    lambda w: w[1].multinomial(4, replacement=True),
    ONE_HOT,
)
drawn("rc.manual_seed", lambda: rc.manual_seed(5).initial_seed(), lambda: torch.manual_seed(5).initial_seed())
drawn("rc.Generator", lambda: rc.Generator().initial_seed(), lambda: torch.Generator().initial_seed())
drawn(
    "rc.Generator",
    lambda: rc.Generator().manual_seed(7).initial_seed(),
    lambda: torch.Generator().manual_seed(7).initial_seed(),
)
drawn("rc.default_generator", lambda: rc.manual_seed(9) and rc.default_generator.initial_seed(),
      lambda: torch.manual_seed(9) and torch.default_generator.initial_seed())
