"""What a collective benchmark measures, without torch: the operators, their sizes and
bus-bandwidth factors (docs/metrics.md, "Collectives", as nccl-tests defines them), and the
parsing of size ranges such as `--min-bytes 1K --max-bytes 256M`.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmdissect.errors import UserError

IN_PLACE, OUT_OF_PLACE = "in-place", "out-of-place"


@dataclass(frozen=True)
class CollectiveOp:
    name: str
    placements: tuple[str, ...]
    """The placements torch.distributed offers for this operator (both only where they differ)."""
    split: bool
    """The larger buffer is split into one chunk per rank, so its element count is a multiple of n."""
    redop: str = "none"
    root: int | None = None

    def busbw_factor(self, n: int) -> float:
        """nccl-tests' factor from algorithm bandwidth to bus bandwidth for `n` ranks:
        all_reduce 2(n-1)/n (reduce-scatter then all-gather, each moving (n-1)/n of the data);
        all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send_recv 1."""
        if n < 1:
            raise ValueError(f"rank count must be >= 1, got {n}")
        if self.name == "all_reduce":
            return 2 * (n - 1) / n
        if self.name in ("all_gather", "reduce_scatter", "all_to_all"):
            return (n - 1) / n
        return 1.0

    def count(self, size_bytes: int, elem_bytes: int, n: int) -> int:
        """Elements of the larger buffer for a requested size: rounded down to a multiple of
        n where the buffer is split per rank, and never fewer than one element per rank."""
        granularity = n if self.split else 1
        return max(granularity, size_bytes // elem_bytes // granularity * granularity)


OPS: dict[str, CollectiveOp] = {op.name: op for op in (
    # torch's all_reduce, broadcast and reduce work on one buffer: in-place only.
    CollectiveOp("all_reduce", (IN_PLACE,), split=False, redop="sum"),
    # size = the gathered output (n chunks); in-place gathers into the output's own chunk.
    CollectiveOp("all_gather", (OUT_OF_PLACE, IN_PLACE), split=True),
    # size = the input (n chunks); in-place writes the result into the input's own chunk.
    CollectiveOp("reduce_scatter", (OUT_OF_PLACE, IN_PLACE), split=True, redop="sum"),
    CollectiveOp("broadcast", (IN_PLACE,), split=False, root=0),
    CollectiveOp("reduce", (IN_PLACE,), split=False, redop="sum", root=0),
    # size = each rank's send buffer (n chunks, one per peer).
    CollectiveOp("all_to_all", (OUT_OF_PLACE,), split=True),
    # each rank sends to rank+1 and receives from rank-1 (a ring), as nccl-tests' sendrecv.
    CollectiveOp("send_recv", (OUT_OF_PLACE,), split=False),
)}

DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}
BACKENDS = ("gloo", "nccl")

MAX_SIZE_BYTES = 64 * 1024**3
MAX_SIZES = 200


def parse_ops(text: str) -> list[str]:
    """`all_reduce,all_gather` or `all` -> operator names (unknown names are a UserError)."""
    names = [n.strip().replace("-", "_") for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(OPS)
    if not names:
        raise UserError("no operator given; choose from: " + ", ".join(OPS))
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise UserError(f"unknown operator {unknown[0]!r}; choose from: {', '.join(OPS)} (or 'all')")
    return list(dict.fromkeys(names))


def parse_size(text: str) -> int:
    """`1024`, `1K`, `256M`, `1G` (binary units as nccl-tests reads them: 1K = 1024 bytes)."""
    from llmdissect.units import parse_bytes

    size = parse_bytes(text, "size")
    if size > MAX_SIZE_BYTES:
        raise UserError(f"bad size {text!r}: larger than {MAX_SIZE_BYTES // 1024**3}G")
    return size


def size_sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*factor, ... up to max inclusive (nccl-tests' -b/-e/-f)."""
    if min_bytes > max_bytes:
        raise UserError(f"bad size range: --min-bytes ({min_bytes} B) is above --max-bytes ({max_bytes} B)")
    if not factor > 1:
        raise UserError(f"bad --factor {factor:g}: must be above 1")
    sizes, s = [], float(min_bytes)
    while round(s) <= max_bytes:
        if not sizes or round(s) > sizes[-1]:
            sizes.append(round(s))
        s *= factor
    if len(sizes) > MAX_SIZES:
        raise UserError(f"--min-bytes {min_bytes}, --max-bytes {max_bytes} and --factor {factor:g} give "
                        f"{len(sizes)} sizes; at most {MAX_SIZES} (raise --factor)")
    return sizes


def algbw_bytes_per_s(size_bytes: int, time_s: float) -> float:
    """algbw = size / time (nccl-tests)."""
    return size_bytes / time_s if time_s > 0 else float("nan")


def busbw_bytes_per_s(op: str, size_bytes: int, time_s: float, n: int) -> float:
    """busbw = algbw x factor(op, n): comparable with the link's hardware bandwidth."""
    return algbw_bytes_per_s(size_bytes, time_s) * OPS[op].busbw_factor(n)


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise UserError(f"unsupported dtype {name!r} for collectives; choose one of {', '.join(DTYPES)}")
    return name


def buffer_bytes_per_rank(ops: list[str], max_bytes: int, elem_bytes: int, n: int) -> int:
    """About the most memory one rank holds at once: base, source, buffer, expected and
    temporaries of the larger buffer (what the memory check before launching compares)."""
    largest = max(OPS[o].count(max_bytes, elem_bytes, n) for o in ops) * elem_bytes
    return 6 * largest
