"""The tiled matmul: SumReduce(Mul(a, b)) over k on the plain template (matmul.cu.j2).

M, N and batch axes (fused.matmul_axes) are flattened into the tile grid; prologues (per-row
reductions, a layer norm's statistics) run before the tile loop and are inlined into the tile loads,
an epilogue (bias, activation, residual) into the final store, with the Scatters it carries
(indexed.carry_rows) and the statistics of the rows it stores (matmul_row_stats.cu.j2).
`TiledContraction` is what the plain and the online-softmax templates (online.py) share.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import sympy

from ..ops.graph import identity_edge
from ..ops.primitives import REDUCE, Node
from ..symbolic.dims import dims_equal, prod
from ..symbolic.index import conjunction, index_of, less
from . import render_c
from .emit import KernelBody, Unfusable
from .fused import linear_index, matmul_axes, same_edge
from .indexed import carry_rows
from .kernels import TILE, Kernel, Late, Launch, finish_kernel, lines_read_by
from .staged import StagedLoads
from .row_maximum import stored_maximum
from .statistics import reads_match, row_statistics, stored_statistics
from .sums import long_chain, loop_fields


@dataclass
class TiledContraction:
    """What the tiled templates share about SumReduce(Mul(a, b)) over k: the kernel body, each source
    axis's index expression (batch, M and N axes flattened into the tile grid), the tile loop's bounds,
    and how to read an operand at (its row or column, k)."""

    body: KernelBody
    reduce: Node
    shape: tuple
    k_axis: int
    axes: tuple  # (batch, m, n) axes of the product's shape
    sizes: dict  # "batch", "m", "n" -> the flattened extent
    per_axis: dict  # source axis -> its index expression
    batch_sym: object
    ka: sympy.Symbol
    kb: sympy.Symbol
    tile_bound: dict

    @staticmethod
    def of(reduce: Node, names, inline: Callable[[Node], bool]) -> "TiledContraction":
        axes = matmul_axes(reduce)
        if axes is None:
            raise Unfusable(f"{reduce.op.name}#{reduce.id} is not a matmul")
        src, k_axis = reduce.srcs[0], reduce.attrs["axis"]
        shape = src.shape
        sizes = {key: prod(shape[a] for a in group) for key, group in zip(("batch", "m", "n"), axes)}
        body = KernelBody(names, inline=lambda n: inline(n) or n is src.node)
        per_axis: dict[int, sympy.Expr] = {}
        batch_sym = None
        for flat_name, key, group in zip(("batch", "bm", "bn"), ("batch", "m", "n"), axes):
            if not group:
                continue
            flat = body.index_var(flat_name, sizes[key])
            batch_sym = flat if flat_name == "batch" else batch_sym
            body.bind_compound = False  # these become index lines of their own, declared before any statement
            components = body.unravel(flat, [shape[a] for a in group])
            body.bind_compound = True
            for a, expr in zip(group, components):
                per_axis[a] = (
                    expr if expr.is_Symbol or expr.is_Integer else body.declare_index(f"o{a}", shape[a], expr)
                )
        ka, kb = body.index_var("ka", shape[k_axis]), body.index_var("kb", shape[k_axis])
        tile_bound = {
            name: less(body.index_var(name), sizes[key]) for name, key in (("bm", "m"), ("bn", "n"))
        }
        tile_bound.update(ka=less(ka, shape[k_axis]), kb=less(kb, shape[k_axis]))
        return TiledContraction(
            body, reduce, tuple(shape), k_axis, axes, sizes, per_axis, batch_sym, ka, kb, tile_bound
        )

    def index(self, k_sym, zero_axes=()) -> list:
        """The source index at (this thread's batch, M and N position, k_sym), `zero_axes` at 0."""
        return [sympy.Integer(0) if a in zero_axes else (k_sym if a == self.k_axis else self.per_axis[a])
                for a in range(len(self.shape))]

    def begin(self, scope: str, guard) -> None:
        """Start a new list of statements, for the template region `scope`, inside `if (guard)`."""
        self.body.statements, self.body.scope, self.body._guards = [], scope, [guard]

    def read(
        self, contraction: Node, which: int, source_index: list, scope: str, guard
    ) -> tuple[list[str], str]:
        """Statements and value of operand `which` of `contraction` (a SumReduce of a Mul) at an index of
        its source, in the template region `scope`, under `guard`."""
        body, product = self.body, contraction.srcs[0].node
        flat, _ = index_of(contraction.srcs[0].views, source_index, body.ranges)
        self.begin(scope, guard)
        return body.statements, body.value_at(product.srcs[which], body.unravel(flat, product.shape))

    def operand(self, which: int, scope: str) -> tuple[list[str], str]:
        """Statements and value of operand a (0, read at (bm, ka)) or b (1, read at (kb, bn))."""
        batch_axes, m_axes, n_axes = self.axes
        k_sym, zero, bounds = (
            (self.ka, n_axes, ("bm", "ka")) if which == 0 else (self.kb, m_axes, ("kb", "bn"))
        )
        guard = conjunction(*(self.tile_bound[b] for b in bounds))  # the template's `if (bm < M && ka < K)`
        return self.read(self.reduce, which, self.index(k_sym, set(zero)), scope, guard)

    def prologue(
        self, reduces: Sequence[Node], welford: frozenset = frozenset(), tile: int = TILE
    ) -> tuple[list[dict], object]:
        """The template's `prologue` phases: each per-row reduction, in graph order, over the rows of the
        block's M tile (threadIdx.y) with threadIdx.x striding over its axis; later phases and the tile
        loads read each result as `statsJ[RC_SLOT]`, once code generation has checked that every read
        is of the thread's own row. A reduction in `welford` (a sum of squared deviations) and its
        row's sum are one phase, a pair, computed in one pass (codegen.statistics). Returns (phases,
        the reduced extent every phase shares)."""
        body = self.body
        batch_axes, m_axes, n_axes = self.axes
        row_axes = [a for a in range(len(self.shape)) if a != self.k_axis and a not in n_axes]
        rows = [self.per_axis[a] for a in row_axes]
        pairs = {}
        for red in reduces:
            if red.id in welford:
                stats = row_statistics(red)
                if stats is None or stats.total not in reduces or not same_edge(red.shape, stats.total.shape):
                    raise Unfusable(
                        f"{red.op.name}#{red.id} is no sum of squared deviations from a mean "
                        f"this prologue sums"
                    )
                pairs[stats.total.id] = stats
        phases, extent, count = [], None, 0
        for red in reduces:
            if red.id in welford:
                continue  # computed with its row's sum
            axis, src_shape = red.attrs["axis"], red.srcs[0].shape
            own = _rows_of(red.shape, [self.shape[a] for a in row_axes], rows)
            if own is None or (extent is not None and not dims_equal(src_shape[axis], extent)):
                raise Unfusable(f"{red.op.name}#{red.id} does not reduce the rows of the matmul's operand a")
            extent = src_shape[axis]
            r = body.index_var("r", extent)
            self.begin("prologue", self.tile_bound["bm"])
            index = own[:axis] + [r] + own[axis:]
            value = body.value_at(red.srcs[0], index)
            pair = pairs.get(red.id)  # the template reads `pair` (and then `value`) for the one-pass phase
            phase = loop_fields(
                body.names, red, body.statements, value, ("total", "As[threadIdx.y][kk]"), tile
            )
            phase.update(pair=pair, stats=[f"stats{count}"])
            body.scalars[red.id] = (
                render_c.element(f"stats{count}", "RC_SLOT"),
                linear_index(own, red.shape),
            )
            if pair is not None:
                if not reads_match(pair, index, linear_index(own, red.shape), body.ranges):
                    raise Unfusable(
                        f"{pair.squares.op.name}#{pair.squares.id} does not read its row's deviations"
                    )
                phase["what"] += f" and {body.names.label(pair.squares)}"
                phase["stats"].append(f"stats{count + 1}")
                body.scalars[pair.squares.id] = (
                    render_c.element(f"stats{count + 1}", "RC_SLOT"),
                    linear_index(own, pair.squares.shape),
                )
            count += len(phase["stats"])
            phases.append(phase)
        return phases, extent

    def out_index(self) -> list:
        return [self.per_axis[a] for a in range(len(self.shape)) if a != self.k_axis]

    def epilogue(self, output: Node, accumulated: str, carried: Sequence[Node] = (),
                 kept: Optional[Node] = None) -> tuple[list[str], str, str]:
        """Statements and value stored at (bm, bn): the reduction (the C name `accumulated`), or
        `output`, an elementwise node of the matmul's shape applied to it; each `carried` Scatter's
        rows written into its table too (out1, out2, ...: indexed.carry_rows); and the value of
        `kept` there, of `output` or computed from it elementwise (a row maximum's E), for the row
        statistics ('' without)."""
        body, reduce = self.body, self.reduce
        self.begin("epilogue", conjunction(self.tile_bound["bm"], self.tile_bound["bn"]))
        out_idx = self.out_index()
        body.scalars[reduce.id] = (accumulated, linear_index(out_idx, reduce.shape))
        if output is reduce:
            result = accumulated
        elif not same_edge(output.shape, reduce.shape):
            raise Unfusable(f"epilogue {output.op.name}#{output.id} does not have the matmul's shape")
        elif output.op.kind == REDUCE:  # a short reduction (relu's maximum of a pair), unrolled
            result = body.unrolled(output, out_idx)
        else:
            result = render_c.node_expr(output, *[body.value_at(s, out_idx) for s in output.srcs])
        body.access("out0", linear_index(out_idx, output.shape), store=True)
        for k, scatter in enumerate(carried):
            carry_rows(body, scatter, f"out{k + 1}", output, out_idx, result)
        value = "" if kept is None else result if kept is output else self._kept(
            output, kept, out_idx, result)
        statements = body.statements
        body.statements, body._guards = [], []
        return statements, result, value

    def _kept(self, output: Node, kept: Node, out_idx: list, result: str) -> str:
        """`kept` at the thread's output, computed from the value stored (`result`) and its own loads."""
        body = self.body
        if not result.isidentifier():
            name = body.fresh()
            body.statements.append(render_c.value_decl(name, result, output.dtype))
            result = name
        body.scalars[output.id] = (result, linear_index(out_idx, output.shape))
        return body.value_at(identity_edge(kept), out_idx)

    def row_statistics(self, output: Node, nodes: Sequence[Node], carried: int) -> dict:
        """The template's fields for computing `nodes`, statistics of the rows of `output` it stores,
        written to the outputs after the `carried` ones: a layer norm's sum and sum of squared
        deviations (codegen.statistics.stored_statistics), or a row's maximum of `output` or of a value
        computed from it elementwise (codegen.row_maximum); `value` is the node whose values are
        reduced, which the epilogue computes."""
        n_axes = self.axes[2]
        out_axes = [a for a in range(len(self.shape)) if a != self.k_axis]
        row = self.body.index_var("bm") + (0 if self.batch_sym is None else self.batch_sym * self.sizes["m"])
        stats = maximum = None
        if list(n_axes) == [out_axes[-1]]:
            found = (self.out_index(), self.sizes["n"], row, self.body.ranges)
            stats = stored_statistics(nodes, output, *found)
            maximum = None if stats is not None else stored_maximum(nodes, output, *found)
        label = self.body.names.label
        if maximum is not None:
            op = maximum.final.op
            return dict(what=f"{label(maximum.final)}, the maximum of {label(maximum.value)}'s rows",
                        maximum=True, value=maximum.value, result=f"out{carried + 1}",
                        identity=render_c.reduce_identity(op),
                        combine=lambda a, b: render_c.op_expr(op, a, b),
                        nodes=(maximum.final,))
        if stats is None:
            raise Unfusable(f"{nodes[0].op.name}#{nodes[0].id}: not the statistics of the rows this matmul "
                            f"stores, along its N axis")
        return dict(what=f"{label(stats.total)} and {label(stats.squares)}", sum=f"out{carried + 1}",
                    squares=f"out{carried + 2}", nodes=(stats.total, stats.squares), maximum=False,
                    value=output)

    def fields(
        self, output: Node, tile: int, b_along_k: bool, loads: list, epilogue: list, result: str
    ) -> dict:
        """The template fields every tiled template reads."""
        out_index = linear_index(self.out_index(), output.shape)
        stores = lambda b: epilogue + [result, b.printer.int(out_index)]  # noqa: E731
        return dict(
            launch=Launch("tiles", self.sizes["m"], tile, extra=(self.sizes["n"], self.sizes["batch"])),
            loop_extent=self.shape[self.k_axis],
            along_k=frozenset({"b"} if b_along_k else ()),
            b_along_k=b_along_k,
            tile=tile,
            batched=Late(lambda b: self.batch_sym in b.printer.used),
            epilogue_statements=epilogue,
            result=result,
            out_index=lambda b: b.printer.int(out_index),
            load_index_lines=Late(lambda b: lines_read_by(b.used_index_lines(), loads)),
            store_index_lines=Late(lambda b: lines_read_by(b.used_index_lines(), stores(b))),
            long_k=long_chain(self.shape[self.k_axis]),  # sum each tile plainly, the tiles' sums compensated
            m=lambda b: b.printer.int(self.sizes["m"]),
            n=lambda b: b.printer.int(self.sizes["n"]),
            k=lambda b: b.printer.int(self.shape[self.k_axis]),
        )


def _rows_of(reduced_shape, row_shape, rows) -> Optional[list]:
    """The index, in a prologue reduction's output coordinates, of the matmul row `rows` (indices over
    `row_shape`), where the two shapes are the same but for axes of extent 1 (a layer norm over
    (B, 1, D) read by a matmul through a reshape to (B, D)): those axes at 0. None where they differ."""
    if same_edge(reduced_shape, row_shape):
        return list(rows)
    kept = [(d, i) for d, i in zip(row_shape, rows) if d != 1]
    wanted = [d for d in reduced_shape if d != 1]
    if len(kept) != len(wanted) or not all(dims_equal(a, d) for a, (d, _) in zip(wanted, kept)):
        return None
    picked = iter(i for _, i in kept)
    return [0 if d == 1 else next(picked) for d in reduced_shape]


MAX_BLOCK_THREADS = 1024  # CUDA's limit on a block


def sliced_problem(template: str, prologue_phases: int, tile: int, slices: int) -> Optional[str]:
    """Why a matmul cannot split K across its block's threads in `slices` (None: it can). Only the plain
    template does (the online softmax and the prologue reductions keep a row's state across all of K in
    one thread), and tile x tile x slices threads must fit one block."""
    if template != "matmul.cu.j2" or prologue_phases:
        return "only a plain matmul splits K across its block (no online softmax, no prologue reductions)"
    if tile * tile * slices > MAX_BLOCK_THREADS:
        return f"{tile} x {tile} x {slices} threads are more than a block's {MAX_BLOCK_THREADS}"
    return None


def matmul_kernel(
    name: str,
    output: Node,
    reduce: Node,
    names,
    inline: Callable[[Node], bool],
    tile: int = TILE,
    render: bool = True,
    b_along_k: bool = False,
    prologue: Sequence[Node] = (),
    welford: frozenset = frozenset(),
    slices: int = 1,
    splits: int = 1,
    carried: Sequence[Node] = (),
    row_stats: Sequence[Node] = (),
) -> Kernel:
    """`b_along_k`: load B's tiles with threadIdx.x walking K (coalesced when B is contiguous along K);
    `prologue`: per-row reductions the operands read, computed by each block before its tile loop;
    `welford`: those of them computed in one pass with their row's sum (codegen.statistics);
    `slices`: K split across the block's threads (threadIdx.z), their sums added in shared memory;
    `splits`: K split across that many blocks per tile, the last to finish adding their partial sums
    in split order (split-K in one kernel: a decode step's few rows get splits x the blocks);
    `carried`: Scatters whose rows are columns of `output`, written into their tables as they are
    stored (a decode step's keys and values into the KV pool: search.carry);
    `row_stats`: a layer norm's sum and sum of squared deviations of the rows it stores, reduced as
    they are stored (matmul_row_stats.cu.j2: search.row_stats)."""
    if slices > 1 and (problem := sliced_problem("matmul.cu.j2", len(prologue), tile, slices)):
        raise Unfusable(problem)
    tc = TiledContraction.of(reduce, names, inline)
    phases, prologue_extent = tc.prologue(prologue, welford, tile)
    squares = tuple(
        phase["pair"].square for phase in phases if phase["pair"]
    )  # computed by the update itself
    staged = StagedLoads(tc.body, tc.body.index_var("bm"), tc.ka, tc.batch_sym,
                         {"bm": tc.tile_bound["bm"], "ka": tc.tile_bound["ka"]}, tile, slices)
    tc.body.stage = staged
    a_statements, a_value = tc.operand(0, "a")
    tc.body.stage = None
    b_statements, b_value = tc.operand(1, "b")
    stats_fields = tc.row_statistics(output, row_stats, len(carried)) if row_stats else None
    epilogue, result, kept = tc.epilogue(output, "acc", carried, stats_fields and stats_fields["value"])
    if stats_fields:
        stats_fields["kept"] = kept
    unread = [n for n in prologue if n.id not in tc.body.scalars_read]
    if unread:
        raise Unfusable(f"{unread[0].op.name}#{unread[0].id} is not read by this matmul's operands")
    nodes = (
        (reduce.srcs[0].node, reduce) + tuple(prologue) + squares + (() if output is reduce else (output,))
        + tuple(carried) + (stats_fields["nodes"] if stats_fields else ())
    )
    parts = staged.columns + staged.rows
    staged_texts = [text for part in parts for text in (part["load"] or "", part["guard"])]
    loads = a_statements + [a_value] + b_statements + [b_value] + staged_texts
    fields = tc.fields(output, tile, b_along_k, loads, epilogue, result)
    per_tile = 0 if not stats_fields else 1 if stats_fields["maximum"] else 2  # ws2 values per row and N tile
    fields["launch"] = replace(fields["launch"], slices=slices, splits=splits, row_stats=per_tile)
    prologue_texts = [line for phase in phases for line in phase["statements"] + [phase["combine"]]]
    return finish_kernel(
        name,
        "matmul",
        "matmul.cu.j2",
        tc.body,
        output,
        nodes,
        fields.pop("launch"),
        True,
        render=render,
        comment_extra=f", matmul tile {tile}"
        + (", B loaded along K" if b_along_k else "")
        + (f", K in {slices} slices" if slices > 1 else "")
        + (f", K split across {splits} blocks" if splits > 1 else "")
        + (f", {len(prologue)} row reduction(s) before the tiles" if phases else "")
        + (f" ({len(squares)} pair(s) in one pass)" if squares else "")
        + "".join(f", rows of {tc.body.names.label(s)} -> out{k + 1}" for k, s in enumerate(carried))
        + (f", its rows' {stats_fields['what']}" if stats_fields else "")
        + (f", {len(staged.columns)} load(s) of A per K step" if staged.columns else "")
        + (f", {len(staged.rows)} load(s) of A per row" if staged.rows else ""),
        prologue_extent=prologue_extent,
        prologue_phases=len(phases),
        prologue_pairs=len(squares),
        staged_columns=len(staged.columns),
        held_values=staged.held_values,
        columns=staged.columns,
        rows=staged.rows,
        row_statements=staged.row_statements,
        row_index_lines=Late(lambda b: lines_read_by(b.used_index_lines(), staged.row_statements)),
        prologue=phases,
        slices=slices,
        splits=splits,
        carried=tuple(carried),
        statistics=stats_fields["nodes"] if stats_fields else (),
        row_stats=stats_fields,
        stats_extent=lambda b: b.printer.int(prologue_extent) if phases else "",
        prologue_index_lines=Late(lambda b: lines_read_by(b.used_index_lines(), prologue_texts)),
        a_statements=a_statements,
        a_value=a_value,
        b_statements=b_statements,
        b_value=b_value,
        **fields,
    )
