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
