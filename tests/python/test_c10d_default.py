"""Which communicator a Manager takes (one process; the multi-process jobs on torch.distributed
are c10d_job.py under `dynatrain launch`): with torch.distributed initialised, comm=None is its
default group and an explicit mpi4py comm still wins; a grow there needs the job's store to be a
TCPStore (processes join through it: test_c10d_grow.py)."""
import pytest
import torch.distributed as dist
from mpi4py import MPI

import dynatrain
from conftest import fill_oracle, oracle_mismatches


@pytest.fixture
def torch_world(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_without_torch_distributed_comm_none_is_mpi():
    assert not dist.is_initialized()
    m = dynatrain.Manager(None, "tiny-dense", "tp=1")
    assert isinstance(m.comm, MPI.Comm)


def test_comm_none_is_the_default_group_and_an_explicit_comm_wins(torch_world):
    m = dynatrain.Manager(None, "tiny-dense", "tp=1", bucket_elems=70_001)
    assert type(m.comm).__name__ == "Comm" and (m.comm.rank, m.comm.size) == (0, 1)
    fill_oracle(m)
    m.switch("tp=1,zero=0")
    assert not oracle_mismatches(m) and m.group("dp").size == 1
    explicit = dynatrain.Manager(MPI.COMM_SELF, "tiny-dense", "tp=1")
    assert isinstance(explicit.comm, MPI.Comm)
    assert type(dynatrain.Manager(dist.group.WORLD, "tiny-dense", "tp=1").comm).__name__ == "Comm"
    other = dist.new_group(ranks=[0])
    with pytest.raises(ValueError, match="other than the default one"):
        dynatrain.Manager(other, "tiny-dense", "tp=1")


def test_a_switch_needing_more_processes_needs_a_tcp_store(torch_world):
    m = dynatrain.Manager(None, "tiny-dense", "tp=1", bucket_elems=70_001)
    fill_oracle(m)
    with pytest.raises(ValueError, match="needs 2 processes, the torch.distributed world has 1: joining processes "
                                         "needs the TCPStore .* this job's store is FileStore"):
        m.switch("dp=2")
    with pytest.raises(ValueError, match=r"vacate=\[0\]: the process of torch.distributed global rank 0 hosts the store"):
        m.switch("tp=1", vacate=[0])
    assert not oracle_mismatches(m) and m.config["config"] == "tp=1,pp=1,dp=1,zero=1"
