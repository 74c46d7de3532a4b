"""The allocator setting the scripts apply (lightning_sched.allocator)."""
import platform

import pytest
import torch

from lightning_sched import ConfigError
from lightning_sched.allocator import reuse_freed_memory


def test_reuse_freed_memory_applies_on_glibc_and_tensors_still_work():
    applied = reuse_freed_memory(64 << 20)
    assert applied is (platform.libc_ver()[0] == "glibc")
    for _ in range(3):  # blocks above the old threshold, freed and reused
        x = torch.ones(8 << 20)
        assert float(x.sum()) == 8 << 20
        del x


def test_reuse_freed_memory_refuses_a_size_below_one_byte():
    with pytest.raises(ConfigError, match="max_block_bytes must be >= 1, got 0"):
        reuse_freed_memory(0)


def test_buffers_hand_out_again_only_what_nobody_holds():
    from tensordict import TensorDict

    from lightning_sched.allocator import Buffers

    buffers = Buffers(keep=2)

    def take():
        return buffers.take((4, 5), torch.float32, "cpu")

    first = take()
    pointer = first.data_ptr()
    assert take().data_ptr() != pointer  # held here
    del first
    holders = {"view": lambda t: t[1:], "numpy": lambda t: t.numpy(), "tensordict": lambda t: TensorDict({"o": t}, [4]),
               "graph": lambda t: torch.nn.Linear(5, 1)(t)}
    for name, hold in holders.items():
        tensor = take()
        assert tensor.data_ptr() == pointer, name  # let go before: back again
        holder = hold(tensor)
        del tensor
        assert take().data_ptr() != pointer, name
        del holder
    assert take().data_ptr() == pointer
    assert buffers.take((4, 6), torch.float32, "cpu").shape == (4, 6)  # each shape its own
