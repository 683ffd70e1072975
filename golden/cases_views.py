"""Golden cases for movement (view) ops: each alone, and in chains that stack views."""
from __future__ import annotations

import numpy as np

import refcomp as rc

from .cases_common import case, f64, normal

T = ("view",)


def _view(name, shape, fn, np_fn, tags=T):
    """One input x of `shape`; outputs fn(x) (a dict) against np_fn(x) (a dict)."""
    return case(
        name,
        build=lambda: fn(rc.input("x", shape)),
        make_inputs=lambda rng, b: {"x": normal(rng, shape)},
        oracle=lambda f: np_fn(f64(f, "x")),
        tags=tags,
    )


def _chain(x):
    # permute -> reshape (merge) -> slice with step -> flip -> pad -> unsqueeze -> expand -> index
    y = x.permute(2, 0, 1).reshape(4, 6)[1:, ::2].flip(0).pad([(1, 0), (0, 2)], value=-1.0)
    return {"y": y.unsqueeze(0).expand(2, 4, 5)[:, ::-1, 1:]}


def _chain_np(x):
    y = np.transpose(x, (2, 0, 1)).reshape(4, 6)[1:, ::2][::-1]
    y = np.pad(y, [(1, 0), (0, 2)], constant_values=-1.0)
    return {"y": np.broadcast_to(y[None], (2, 4, 5))[:, ::-1, 1:]}


def _concat_build():
    a, b, c = rc.input("a", (2, 3)), rc.input("b", (2, 1)), rc.input("c", (2, 4))
    return {"cols": rc.concat([a, b, c], axis=1), "rows": rc.concat([a, a * 2.0], axis=0),
            "neg_axis": rc.concat([c, a], axis=-1)}


def _concat_np(f):
    a, b, c = f64(f, "a", "b", "c")
    return {"cols": np.concatenate([a, b, c], axis=1), "rows": np.concatenate([a, a * 2.0], axis=0),
            "neg_axis": np.concatenate([c, a], axis=-1)}


def _stack_build():
    a, b = rc.input("a", (3, 4)), rc.input("b", (3, 4))
    return {
        "first": rc.stack([a, b, a], axis=0),
        "last": rc.stack([a, b], axis=-1),
        "mid": rc.stack([a, b], axis=1),
    }


def _stack_np(f):
    a, b = f64(f, "a", "b")
    return {
        "first": np.stack([a, b, a], axis=0),
        "last": np.stack([a, b], axis=-1),
        "mid": np.stack([a, b], axis=1),
    }


CASES = [
    _view(
        "view_permute",
        (2, 3, 4),
        lambda x: {"p": x.permute(2, 0, 1), "t": x.transpose(0, 2), "T": x.T, "neg": x.permute(-1, -3, -2)},
        lambda x: {"p": x.transpose(2, 0, 1), "t": x.swapaxes(0, 2), "T": x.T, "neg": x.transpose(2, 0, 1)},
    ),
    _view(
        "view_reshape_merge",
        (2, 3, 4),
        lambda x: {"y": x.reshape(6, 4), "flat": x.reshape(-1), "z": x.reshape(2, 12)},
        lambda x: {"y": x.reshape(6, 4), "flat": x.reshape(-1), "z": x.reshape(2, 12)},
    ),
    _view(
        "view_reshape_split",
        (24,),
        lambda x: {"y": x.reshape(2, 3, 4), "z": x.reshape(4, -1, 2)},
        lambda x: {"y": x.reshape(2, 3, 4), "z": x.reshape(4, -1, 2)},
    ),
    _view(
        "view_permute_reshape",
        (2, 3, 4),
        lambda x: {
            "y": x.permute(1, 2, 0).reshape(12, 2),
            "z": x.transpose(0, 1).reshape(3, 8).T.reshape(4, 6),
        },
        lambda x: {
            "y": x.transpose(1, 2, 0).reshape(12, 2),
            "z": x.swapaxes(0, 1).reshape(3, 8).T.reshape(4, 6),
        },
    ),
    _view(
        "view_expand",
        (3, 1),
        lambda x: {
            "e": x.expand(3, 4),
            "lead": x.expand(2, 3, 5),
            "keep": x.expand(-1, 2),
            "bt": x.broadcast_to((2, 3, 3)),
        },
        lambda x: {
            "e": np.broadcast_to(x, (3, 4)),
            "lead": np.broadcast_to(x, (2, 3, 5)),
            "keep": np.broadcast_to(x, (3, 2)),
            "bt": np.broadcast_to(x, (2, 3, 3)),
        },
    ),
    _view(
        "view_slice_step",
        (8, 9),
        lambda x: {"a": x[1:7:2, ::3], "b": x[2:, :-2], "c": x[-3:, 4:5], "d": x[::4, 1::2]},
        lambda x: {"a": x[1:7:2, ::3], "b": x[2:, :-2], "c": x[-3:, 4:5], "d": x[::4, 1::2]},
    ),
    _view(
        "view_slice_negative_step",
        (7, 6),
        lambda x: {"rev": x[::-1], "a": x[6:1:-2], "b": x[:, ::-3], "c": x[-2::-1, 4:0:-1]},
        lambda x: {"rev": x[::-1], "a": x[6:1:-2], "b": x[:, ::-3], "c": x[-2::-1, 4:0:-1]},
    ),
    _view(
        "view_index_none",
        (3, 4, 5),
        lambda x: {
            "a": x[2, None, :, 1],
            "b": x[..., 0],
            "c": x[-1],
            "d": x[None, 1, ..., None],
            "e": x[0, 3, 4],
        },
        lambda x: {
            "a": x[2, None, :, 1],
            "b": x[..., 0],
            "c": x[-1],
            "d": x[None, 1, ..., None],
            "e": x[0, 3, 4],
        },
    ),
    _view(
        "view_squeeze_unsqueeze",
        (3, 1, 4),
        lambda x: {
            "s": x.squeeze(1),
            "u": x.unsqueeze(0),
            "u_end": x.unsqueeze(-1),
            "su": x.squeeze(-2).unsqueeze(1),
        },
        lambda x: {"s": x[:, 0], "u": x[None], "u_end": x[..., None], "su": x[:, 0][:, None]},
    ),
    _view(
        "view_pad_zero",
        (3, 4),
        lambda x: {"y": x.pad([(1, 2), (0, 3)]), "one_side": x.pad([(0, 0), (2, 0)])},
        lambda x: {"y": np.pad(x, [(1, 2), (0, 3)]), "one_side": np.pad(x, [(0, 0), (2, 0)])},
    ),
    _view(
        "view_pad_value",
        (3, 4),
        lambda x: {"y": x.pad([(2, 1), (1, 1)], value=-2.5), "big": x.pad([(0, 1), (3, 0)], value=100.0)},
        lambda x: {
            "y": np.pad(x, [(2, 1), (1, 1)], constant_values=-2.5),
            "big": np.pad(x, [(0, 1), (3, 0)], constant_values=100.0),
        },
    ),
    _view(
        "view_flip",
        (2, 3, 4),
        lambda x: {"one": x.flip(1), "two": x.flip((0, 2)), "all": x.flip(), "neg": x.flip(-1)},
        lambda x: {
            "one": x[:, ::-1],
            "two": x[::-1, :, ::-1],
            "all": x[::-1, ::-1, ::-1],
            "neg": x[..., ::-1],
        },
    ),
    case(
        "view_concat",
        build=_concat_build,
        make_inputs=lambda rng, b: {
            "a": normal(rng, (2, 3)),
            "b": normal(rng, (2, 1)),
            "c": normal(rng, (2, 4)),
        },
        oracle=_concat_np,
        tags=T,
    ),
    case(
        "view_stack",
        build=_stack_build,
        make_inputs=lambda rng, b: {"a": normal(rng, (3, 4)), "b": normal(rng, (3, 4))},
        oracle=_stack_np,
        tags=T,
    ),
    _view("view_chain", (2, 3, 4), _chain, _chain_np),
    _view(
        "view_as_strided_windows",
        (10,),
        lambda x: {"w": x.as_strided((4, 3), (2, 1)), "off": x.as_strided((3, 2), (3, 1), 1)},
        lambda x: {
            "w": np.stack([x[2 * i : 2 * i + 3] for i in range(4)]),
            "off": np.stack([x[1 + 3 * i : 3 + 3 * i] for i in range(3)]),
        },
    ),
    _view(
        "view_slice_after_pad_and_permute",
        (3, 5),
        lambda x: {"y": x.pad([(1, 1), (2, 0)]).T[1:6:2, ::-1].reshape(3, 5, 1).permute(2, 0, 1)},
        lambda x: {"y": np.pad(x, [(1, 1), (2, 0)]).T[1:6:2, ::-1].reshape(3, 5, 1).transpose(2, 0, 1)},
    ),
    _view(
        "view_reshape_of_masked_views",
        (3, 4),
        lambda x: {
            "pad_flat": x.pad([(1, 0), (0, 2)], value=2.0).reshape(-1),
            "pad_split": x.pad([(1, 1), (1, 1)]).reshape(6, 5),
            "expand_merge": x[:, None].expand(3, 2, 4).reshape(6, 4),
            "step_flat": x[::2, ::-1].reshape(8),
            "pad_of_pad": x.pad([(1, 0), (0, 0)], 5.0).pad([(0, 2), (1, 1)], -1.0),
            "into_pad": x.pad([(2, 2), (0, 0)])[1:6:2],
            "rev_into_pad": x.pad([(2, 1), (0, 0)])[5:0:-2],
        },
        lambda x: {
            "pad_flat": np.pad(x, [(1, 0), (0, 2)], constant_values=2.0).reshape(-1),
            "pad_split": np.pad(x, 1).reshape(6, 5),
            "expand_merge": np.broadcast_to(x[:, None], (3, 2, 4)).reshape(6, 4),
            "step_flat": x[::2, ::-1].reshape(8),
            "pad_of_pad": np.pad(
                np.pad(x, [(1, 0), (0, 0)], constant_values=5.0), [(0, 2), (1, 1)], constant_values=-1.0
            ),
            "into_pad": np.pad(x, [(2, 2), (0, 0)])[1:6:2],
            "rev_into_pad": np.pad(x, [(2, 1), (0, 0)])[5:0:-2],
        },
    ),
]
