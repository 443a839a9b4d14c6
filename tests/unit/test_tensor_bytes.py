"""measure.memory.tensor_bytes: the bytes a rank holds, a DTensor's local shard included.

FSDP2's parameters and the AdamW state made from them are DTensors, whose own
untyped_storage() reports the global tensor: the CPU memory pass counted every rank's
optimizer state whole (the quick suite's FSDP2 ZeRO-3 x2 baseline read 150 MiB where the
rank holds 90). A fake process group of two ranks makes the shard in one process.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmdissect.measure.memory import tensor_bytes  # noqa: E402


def test_plain_tensors_count_each_storage_once():
    a = torch.zeros(1000)
    assert tensor_bytes([a, a[:10], None, torch.zeros(10, dtype=torch.bfloat16)]) == 4000 + 20


def test_a_sharded_dtensor_counts_its_local_shard():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (2,))
        param = distribute_tensor(torch.zeros(1000, 100), mesh, [Shard(0)])
        state = torch.zeros_like(param)  # as AdamW makes exp_avg from a DTensor parameter
        assert param.untyped_storage().nbytes() == 1000 * 100 * 4  # the global size: why to_local
        assert tensor_bytes([param, state]) == 2 * 500 * 100 * 4
    finally:
        dist.destroy_process_group()
