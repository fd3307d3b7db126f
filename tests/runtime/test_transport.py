import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from mlxe.runtime.transport.weights import SharedWeights
from mlxe.runtime.transport.workers import ProcessPool, ThreadPool, WorkerFailed


def echo(channel, scale):
    while True:
        msg = channel.recv()
        if msg[0] == "close":
            return
        channel.send(("echo", msg[1] * scale))


def raiser(channel):
    channel.recv()
    raise ValueError("bad thing in worker")


def dies(channel):
    channel.recv()
    os._exit(3)


def read_weights(channel, weights):
    out = np.zeros(weights.size, np.float32)
    version = -1
    while True:
        msg = channel.recv()
        if msg[0] == "close":
            return
        version = weights.read_into(out, version)
        channel.send(("weights", version, out.copy()))


CTX = mp.get_context("fork")


@pytest.mark.parametrize("make", [lambda w: ThreadPool(w), lambda w: ProcessPool(w, CTX)], ids=["threads", "processes"])
def test_pool_round_trips_numpy_messages(make):
    pool = make([("a", echo, (2,)), ("b", echo, (3,))])
    try:
        pool.send(0, ("x", np.arange(3)))
        pool.send(1, ("x", np.arange(3)))
        got = {}
        while len(got) < 2:
            reply = pool.recv(5.0)
            assert reply is not None
            got[reply[0]] = reply[1][1]
        np.testing.assert_array_equal(got[0], [0, 2, 4])
        np.testing.assert_array_equal(got[1], [0, 3, 6])
        assert pool.recv(0.05) is None
    finally:
        pool.close()


@pytest.mark.parametrize("make", [lambda w: ThreadPool(w), lambda w: ProcessPool(w, CTX)], ids=["threads", "processes"])
def test_worker_exception_names_the_worker(make):
    pool = make([("executor-7", raiser, ())])
    try:
        pool.send(0, ("go",))
        with pytest.raises(WorkerFailed, match=r"executor-7 failed.*bad thing in worker"):
            pool.recv(5.0)
    finally:
        pool.close()


def torch_threads(channel):
    import torch

    channel.recv()
    channel.send(("threads", torch.get_num_threads()))


def test_a_forked_worker_computes_with_its_own_thread_count_not_its_parents():
    import torch

    parent = torch.get_num_threads()
    torch.set_num_threads(2)
    pool = ProcessPool([("executor-0", torch_threads, ())], CTX, threads=1)
    try:
        pool.send(0, ("go",))
        assert pool.recv(10.0) == (0, ("threads", 1))
    finally:
        pool.close()
        torch.set_num_threads(parent)


def test_dead_process_is_detected_not_waited_for():
    pool = ProcessPool([("executor-1", dies, ())], CTX)
    try:
        pool.send(0, ("go",))
        start = time.monotonic()
        with pytest.raises(WorkerFailed, match=r"executor-1 failed: died \(exit code 3\)"):
            pool.recv(10.0)
        assert time.monotonic() - start < 5.0
    finally:
        pool.close()


def test_shared_weights_versions_threads():
    w = SharedWeights(4)
    out = np.zeros(4, np.float32)
    assert w.read_into(out, 0) == 0  # nothing new: no copy
    assert w.publish(np.arange(4, dtype=np.float32)) == 1
    assert w.read_into(out, 0) == 1
    np.testing.assert_array_equal(out, [0, 1, 2, 3])
    out[:] = -1
    assert w.read_into(out, 1) == 1
    np.testing.assert_array_equal(out, -1)  # same version: left alone


@pytest.mark.parametrize("ctx", [None, CTX], ids=["threads", "processes"])
def test_shared_weights_keep_the_newest_slots_versions(ctx):
    w = SharedWeights(3, ctx, slots=2)
    out = np.zeros(3, np.float32)
    for v in (1, 2, 3):
        w.publish(np.full(3, float(v), np.float32))
    assert w.read_into(out, -1) == 3 and out[0] == 3.0  # the newest by default
    assert w.read_into(out, 3, version=2) == 2 and out[0] == 2.0  # the one before, still held
    out[:] = -1
    assert w.read_into(out, 2, version=2) == 2 and out[0] == -1.0  # already held: no copy
    with pytest.raises(RuntimeError, match="weights version 1 is not held: the newest is 3, 2 kept"):
        w.read_into(out, 2, version=1)


def test_shared_weights_reach_a_child_process():
    w = SharedWeights(5, CTX)
    pool = ProcessPool([("reader", read_weights, (w,))], CTX)
    try:
        w.publish(np.full(5, 2.5, np.float32))
        pool.send(0, ("read",))
        _, (_, version, values) = pool.recv(5.0)
        assert version == 1
        np.testing.assert_array_equal(values, 2.5)
        w.publish(np.arange(5, dtype=np.float32))
        pool.send(0, ("read",))
        _, (_, version, values) = pool.recv(5.0)
        assert version == 2
        np.testing.assert_array_equal(values, np.arange(5))
    finally:
        pool.close()


def hold_the_lock(lock, conn):
    with lock:
        conn.send("holding")
        time.sleep(60)


def test_shared_weights_under_spawn_leave_nothing_named_and_a_dead_holder_no_lock(monkeypatch):
    """D14: multiprocessing.Lock under spawn is a named semaphore in /dev/shm that outlived a kill -9
    of the run. Every named resource of multiprocessing (semaphore, shared_memory) is registered with
    the resource tracker: none is here. The lock goes to a spawned child, and a child killed while it
    holds it leaves it free."""
    from multiprocessing import resource_tracker

    registered = []
    monkeypatch.setattr(resource_tracker, "register", lambda name, kind: registered.append((name, kind)))
    spawn = mp.get_context("spawn")
    w = SharedWeights(4, spawn, slots=2)
    ours, theirs = spawn.Pipe()
    holder = spawn.Process(target=hold_the_lock, args=(w._lock, theirs), daemon=True)
    holder.start()
    try:
        assert ours.poll(60) and ours.recv() == "holding"
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
        assert w.publish(np.ones(4, np.float32)) == 1  # the kernel released the dead holder's lock
    finally:
        holder.kill()
    assert registered == []


def read_versions(channel, weights, count):
    """Read ``count`` new versions as they come; report how many were not all one version."""
    out = np.zeros(weights.size, np.float32)
    version, seen, torn = -1, 0, 0
    while seen < count:
        new = weights.read_into(out, version)
        if new != version:
            version, seen = new, seen + 1
            torn += not np.all(out == version)
    channel.send(("torn", torn))


def test_a_reader_never_sees_a_vector_half_published():
    w = SharedWeights(1 << 16, CTX)  # 256 KiB: a copy long enough to overlap the next publish
    pool = ProcessPool([("reader", read_versions, (w, 200))], CTX)
    try:
        reply = None
        while reply is None:  # publish as fast as possible until the reader has seen its versions
            w.publish(np.full(w.size, float(w.version + 1), np.float32))
            reply = pool.recv(0)
        assert reply[1] == ("torn", 0)
    finally:
        pool.close()
