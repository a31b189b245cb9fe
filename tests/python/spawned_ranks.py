"""Test support: start a data-parallel job's ranks with torch.multiprocessing (spawn) and wait for
them, killing them past a deadline, so a hung collective fails a test instead of hanging it."""

import socket
import time

import pytest


def free_port():
    """A TCP port free on 127.0.0.1 now (the rendezvous's MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(train_rank, args, world_size, timeout_s):
    """Runs train_rank(rank, *args) in world_size spawned processes; fails the test (and kills
    what is left) when they have not all finished within timeout_s."""
    import torch.multiprocessing as mp

    context = mp.start_processes(
        train_rank, args=args, nprocs=world_size, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"the {world_size}-rank job did not finish in {timeout_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
