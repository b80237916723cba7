"""Replays that are interrupted, abandoned or overlap, and tensors shared or misused.

- An exception (Ctrl-C) while g.run() or Backend.matvec waits, or a dropped
  Replay handle, leaves the graph usable: the replay is waited for.
- A graph can be waited on itself (Graph.wait).
- Nothing a replay in flight uses can be changed under it: its weights
  freed, a tensor it uses written or read from the host, or a graph that
  writes what it reads (or reads what it writes) submitted; each is a clear
  error, whichever graph was waited on last.
- Tensor.write on a tensor no graph takes as input, after its first replay,
  would never reach the device: an error.
- MUL_MAT_ID ids in a device tensor are checked on the host before every
  replay; ids the device itself writes cannot be, and are refused unless
  every op that writes them keeps them in range by construction (the
  mixture-of-experts router), in this graph and any other.
- A graph run from two threads while a third destroys it or frees its
  weights: each run gives the right result or a clear error.
- submit() returns while the device still runs the replay (kp patch 0009),
  and the guards above hold while it really runs; a Ctrl-C between submit
  and wait leaves the graph waitable and usable, and a process that dies of
  it with a replay in flight ends without a crash.
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ggml_quant
import vkq
from conftest import random_x


def upload(backend, rows, k, seed=0, n_expert=None, qtype="Q4_0"):
    shape = (rows, k) if n_expert is None else (n_expert, rows, k)
    return backend.upload(qtype, shape, ggml_quant.random_weights(rows * (n_expert or 1), k, qtype, seed=seed))


def simple_graph(backend, w, k=64):
    g = backend.graph()
    x = g.input(backend.tensor(k))
    y = g.output(g.matvec(w, x))
    return g, x, y


class Interrupting:
    """Stands in for a graph's kp.Sequence: eval_await raises KeyboardInterrupt
    once, after the wait (a Ctrl-C that lands as it returns) or before it."""

    def __init__(self, seq, after: bool):
        self.seq, self.after, self.armed = seq, after, True

    def eval_await(self):
        if self.armed:
            self.armed = False
            if self.after:
                self.seq.eval_await()
            raise KeyboardInterrupt
        return self.seq.eval_await()

    def __getattr__(self, name):
        return getattr(self.seq, name)


@pytest.mark.parametrize("after", [True, False], ids=["after-wait", "before-wait"])
def test_interrupted_run(backend, after):
    w = upload(backend, 32, 64)
    g, x, y = simple_graph(backend, w)
    g.run()
    g._seq = Interrupting(g._seq, after)
    x.write(random_x(64))
    with pytest.raises(KeyboardInterrupt):
        g.run()
    x.write(random_x(64, seed=2))  # nothing is in flight any more
    g.run()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64, seed=2), config=g.matvecs[0][1]))


@pytest.mark.parametrize("after", [True, False], ids=["after-wait", "before-wait"])
def test_interrupted_matvec(backend, after):
    w = upload(backend, 32, 64, seed=1)
    want = backend.matvec(w, random_x(64))
    (call,) = w._calls.values()
    call.graph._seq = Interrupting(call.graph._seq, after)
    with pytest.raises(KeyboardInterrupt):
        backend.matvec(w, random_x(64, seed=3))
    assert np.array_equal(backend.matvec(w, random_x(64)), want)


def test_dropped_replay_handle(backend):
    w = upload(backend, 32, 64, seed=2)
    g, x, y = simple_graph(backend, w)
    x.write(random_x(64))
    g.submit()  # the handle is dropped at once: the replay is waited for
    y.read()
    r = g.submit()
    del r
    g.run()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64), config=g.matvecs[0][1]))


def test_graph_wait(backend):
    w = upload(backend, 32, 64, seed=3)
    g, x, y = simple_graph(backend, w)
    g.wait()  # nothing in flight: nothing to do
    x.write(random_x(64))
    r = g.submit()
    with pytest.raises(RuntimeError, match=r"in flight.*wait\(\)"):
        g.submit()
    g.wait()
    with pytest.raises(RuntimeError, match="already waited"):
        r.wait()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64), config=g.matvecs[0][1]))


def test_replay_outlives_its_graph_and_backend():
    """The graph and the backend dropped while a replay is in flight: the
    replay holds them; waiting for it gives the result."""
    b = vkq.Backend()
    w = upload(b, 32, 64, seed=4)
    want = b.matvec(w, random_x(64))
    g, x, y = simple_graph(b, w)
    x.write(random_x(64))
    r = g.submit()
    del g, b, w
    gc.collect()
    r.wait()
    assert np.array_equal(y.read(), want)
    del r, x, y
    gc.collect()


def test_destroy_and_free_race_runs(backend):
    """Two threads run a graph while a third destroys it (or frees its weights),
    a thousand times over with a short switch interval: every run gives the
    single-threaded y or a clear RuntimeError, and the process survives
    (destroy freed pipelines mid-record: heap corruption, wrong y)."""
    data = ggml_quant.random_weights(32, 64, "Q4_0", seed=9)
    xv = random_x(64)
    kept = backend.upload("Q4_0", (32, 64), data)  # (its cached call keeps the pipeline compiled)
    want = backend.matvec(kept, xv)
    clear = ("destroyed", "in flight", "freed")
    errors = []

    def guarded(action):
        try:
            action()
        except RuntimeError as e:
            if not any(c in str(e) for c in clear):
                errors.append(repr(e))
        except Exception as e:  # noqa: BLE001 (any other exception is the failure looked for)
            errors.append(repr(e))

    def runner(g, y):
        def run_and_check():
            g.run()
            got = y.read()
            if not np.array_equal(got, want):
                errors.append(f"wrong y {got[:3]}")
        for _ in range(3):
            guarded(run_and_check)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(1000):
            w = backend.upload("Q4_0", (32, 64), data)
            g, x, y = simple_graph(backend, w)
            x.write(xv)
            ending = threading.Thread(target=guarded, args=(g.destroy if i % 2 else w.free,))
            threads = [threading.Thread(target=runner, args=(g, y)) for _ in range(2)] + [ending]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            g.destroy()
            w.free()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:5]


def test_weights_cannot_be_freed_under_a_replay(backend):
    w = upload(backend, 32, 64, seed=5)
    g, x, y = simple_graph(backend, w)
    r = g.submit()
    with pytest.raises(RuntimeError, match="in flight"):
        w.free()
    assert not w.freed
    r.wait()
    w.free()
    with pytest.raises(RuntimeError, match="freed"):
        g.run()


def long_graph(backend):
    """A graph whose replay keeps lavapipe busy for tens of milliseconds (48
    mat-vecs of 1024 x 1024), run once: (graph, weights, x, y, y's values)."""
    w = upload(backend, 1024, 1024, seed=12)
    g = backend.graph()
    x = g.input(backend.tensor(1024))
    y = g.output([g.matvec(w, x) for _ in range(48)][-1])
    x.write(random_x(1024, seed=12))
    g.run()
    return g, w, x, y, y.read()


def submit_in_flight(g, tries: int = 5):
    """g.submit() until its replay is still running on the device when submit
    returns (a host that loses its core for longer than a replay sees it
    done): that Replay. A submit that waits for the device never gets one."""
    for _ in range(tries):
        r = g.submit()
        if not r.done:
            return r
        r.wait()
    pytest.fail(f"submit() returned after the device had finished the replay, {tries} times out of {tries}")


def test_guards_hold_while_a_replay_really_runs(backend):
    g, w, x, y, want = long_graph(backend)
    r = submit_in_flight(g)
    assert g.in_flight
    refused = {"destroy": g.destroy, "run": g.run, "submit": g.submit, "free its weights": w.free,
               "read its output": y.read, "read its input": x.read,
               "write its input": lambda: x.write(random_x(1024, seed=13))}
    for what, action in refused.items():
        with pytest.raises(RuntimeError, match="in flight"):
            action()
    assert g.in_flight and not w.freed
    # what shares only the weights (read on both sides) runs meanwhile: Backend.matvec's own graph
    assert np.array_equal(backend.matvec(w, random_x(1024, seed=12), config=g.matvecs[0][1]), want)
    r.wait()
    assert r.done and not g.in_flight
    assert np.array_equal(y.read(), want)
    g.run()  # the graph goes on, then goes
    g.destroy()
    w.free()


def submit_then_ctrl_c(g):
    r = submit_in_flight(g)
    signal.raise_signal(signal.SIGINT)  # Ctrl-C, landing between submit and wait
    r.wait()  # never reached


@pytest.mark.parametrize("then", ["wait", "drop"])
def test_ctrl_c_between_submit_and_wait(backend, then):
    """The interrupted frame (and its Replay) lives on in the traceback, as in
    a REPL: the replay stays in flight, guarded, until g.wait(), or until the
    traceback goes and the dropped Replay waits for itself."""
    g, w, x, y, want = long_graph(backend)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        submit_then_ctrl_c(g)
    assert g.in_flight
    with pytest.raises(RuntimeError, match="in flight"):
        g.destroy()
    if then == "wait":
        g.wait()
    del interrupted
    gc.collect()
    assert not g.in_flight
    assert np.array_equal(y.read(), want)
    g.run()
    assert np.array_equal(y.read(), want)
    g.destroy()
    with pytest.raises(RuntimeError, match="destroyed"):
        g.run()
    w.free()


def test_process_killed_by_ctrl_c_with_a_replay_in_flight():
    """An uncaught Ctrl-C while a replay runs: the process dies of SIGINT, as
    Python's do, with the KeyboardInterrupt's traceback and no crash (the
    device's teardown waits for the replay)."""
    script = """
import signal, sys
sys.path.insert(0, {tests!r})
import vkq
from test_graph_safety import long_graph, submit_in_flight
g, w, x, y, want = long_graph(vkq.Backend())
replay = submit_in_flight(g)
print("in flight", flush=True)
signal.raise_signal(signal.SIGINT)
print("not interrupted", flush=True)
""".format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert done.stdout == "in flight\n", (done.stdout, done.stderr[-2000:])
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr[-2000:])
    assert done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr[-2000:]


def two_graphs(backend):
    """A: h = W1 x (h an output); B: z = W2 h (B writes z, reads h)."""
    w1, w2 = upload(backend, 64, 64, seed=6), upload(backend, 32, 64, seed=7)
    a, x, h = simple_graph(backend, w1)
    b = backend.graph()
    z = b.output(b.matvec(w2, h))
    return a, b, x, h, z, w1, w2


def test_overlapping_graphs_are_refused(backend):
    a, b, x, h, z, w1, w2 = two_graphs(backend)
    x.write(random_x(64))
    ra = a.submit()
    with pytest.raises(RuntimeError, match="in flight"):
        b.submit()  # B reads h, which A writes
    ra.wait()
    rb = b.submit()
    with pytest.raises(RuntimeError, match="in flight"):
        a.submit()  # A writes h, which B reads
    rb.wait()
    # one tensor in two graphs: B reads the h that A's last replay left on the device
    a.run()
    b.run()
    want = backend.matvec(w2, backend.matvec(w1, random_x(64), config=a.matvecs[0][1]), config=b.matvecs[0][1])
    assert np.array_equal(z.read(), want)


def test_graphs_sharing_only_reads_overlap(backend):
    """Two graphs that read one constant tensor may run together; the constant
    stays untouchable until both are waited for, in either order."""
    from vkq.llama.vector_ops import SwiGLU, Vectors

    c = backend.tensor(64)
    c.write(np.ones(64, np.float32))
    outs, graphs = [], []
    for i in range(2):
        g = backend.graph()
        gate = g.input(backend.tensor(64))
        gate.write(np.full(64, float(i), np.float32))
        out = g.output(backend.tensor(64))
        g.add(SwiGLU(backend.device, Vectors(gate, 64), Vectors(c, 64), Vectors(out, 64)))
        graphs.append(g)
        outs.append(out)
    ra = graphs[0].submit()
    rb = graphs[1].submit()
    rb.wait()
    with pytest.raises(RuntimeError, match="in flight"):
        c.read()  # A still runs
    ra.wait()
    assert np.allclose(outs[1].read(), 1 / (1 + np.exp(-1.0)))
    assert not outs[0].read().any()


def test_write_of_a_tensor_no_replay_uploads_again(backend):
    w = upload(backend, 32, 64, seed=8)
    g = backend.graph()
    x = backend.tensor(64)  # not an input: its values go up at the first replay only
    x.write(random_x(64))
    y = g.output(g.matvec(w, x))
    x.write(random_x(64, seed=9))  # still before the first replay: taken
    g.run()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64, seed=9), config=g.matvecs[0][1]))
    with pytest.raises(RuntimeError, match="not an input"):
        x.write(random_x(64))


def test_tensor_write_checks(backend):
    t = backend.tensor(5, 3)
    v = np.arange(15, dtype=np.float32).reshape(3, 5)
    t.write(np.asfortranarray(v))  # any memory order: the values count
    assert np.array_equal(t.read(), v)
    t.write(np.arange(30, dtype=np.float32).reshape(3, 10)[:, ::2])  # a strided view
    assert np.array_equal(t.read(), np.arange(30, dtype=np.float32).reshape(3, 10)[:, ::2])
    with pytest.raises(ValueError, match=r"shape \(3, 5\), got \(5, 3\)"):
        t.write(np.ascontiguousarray(v.T))
    with pytest.raises(ValueError, match="shape"):
        t.write(np.zeros(15, np.float32))
    with pytest.raises(TypeError, match="float32"):
        t.write(v.astype(np.int32))
    with pytest.raises(TypeError, match="numpy array"):
        t.write(v.tolist())


# -- MUL_MAT_ID ids on the device ------------------------------------------------------

def moe_graph(backend, ids_tensor, as_input: bool):
    w = upload(backend, 16, 64, seed=10, n_expert=3)
    g = backend.graph()
    x = g.input(backend.tensor(64))
    if as_input:
        g.input(ids_tensor)
    y = g.output(g.matvec_id(w, x, ids_tensor))
    x.write(random_x(64))
    return g, w, y


@pytest.mark.parametrize("bad", [[0, 3], [-1, 1], [2, 1 << 30]])
def test_graph_ids_out_of_range_are_refused(backend, bad):
    ids = backend.tensor(2, dtype=np.int32)
    g, w, y = moe_graph(backend, ids, as_input=False)
    ids.write(np.array(bad, np.int32))  # a constant: on the device at the first replay
    with pytest.raises(ValueError, match=r"ids .* out of range.*\[0, 3\)"):
        g.run()
    ids.write(np.array([2, 0], np.int32))  # never uploaded: still writable
    g.run()
    assert np.array_equal(y.read(), backend.matvec_id(w, random_x(64), np.array([2, 0], np.int32),
                                                      config=g.matvecs[0][1]))


def test_graph_input_ids_are_checked_every_replay(backend):
    ids = backend.tensor(2, dtype=np.int32)
    g, w, y = moe_graph(backend, ids, as_input=True)
    ids.write(np.array([1, 2], np.int32))
    g.run()
    ids.write(np.array([1, 3], np.int32))
    with pytest.raises(ValueError, match="out of range"):
        g.run()


def test_device_written_ids_are_refused(backend):
    from vkq.llama.vector_ops import Argmax, Vectors

    w = upload(backend, 16, 64, seed=11, n_expert=3)
    g = backend.graph()
    logits = g.input(backend.tensor(3))
    ids = backend.tensor(1, dtype=np.int32)
    g.add(Argmax(backend.device, Vectors(logits, 3), ids))
    with pytest.raises(ValueError, match="written on the device"):
        g.matvec_id(w, g.input(backend.tensor(64)), ids)


def routing_graph(backend, n_logits: int, ids):
    from vkq.llama.vector_ops import ExpertRouting, Vectors

    g = backend.graph()
    logits = g.input(backend.tensor(n_logits))
    g.add(ExpertRouting(backend.device, Vectors(logits, n_logits), ids, backend.tensor(ids.length), ids.length))
    return g, logits


def test_ids_of_the_router_op_are_in_range_by_construction(backend):
    """ExpertRouting keeps its ids in [0, n_expert): a MUL_MAT_ID may read them."""
    w = upload(backend, 16, 64, seed=11, n_expert=3)
    ids = backend.tensor(2, dtype=np.int32)
    g, logits = routing_graph(backend, 3, ids)
    x = g.input(backend.tensor(64))
    y = g.output(g.matvec_id(w, x, ids))
    g.output(ids)
    logits.write(np.array([0.5, -1.0, 2.0], np.float32))
    x.write(random_x(64))
    g.run()
    assert ids.read().tolist() == [2, 0]
    assert np.array_equal(y.read(), backend.matvec_id(w, random_x(64), np.array([2, 0], np.int32),
                                                      config=g.matvecs[0][1]))


def test_ids_of_a_router_over_more_experts_are_refused(backend):
    w = upload(backend, 16, 64, seed=11, n_expert=3)
    ids = backend.tensor(2, dtype=np.int32)
    g, _ = routing_graph(backend, 5, ids)
    with pytest.raises(ValueError, match=r"does not keep them in \[0, 3\)"):
        g.matvec_id(w, g.input(backend.tensor(64)), ids)
    # the other order: the MUL_MAT_ID first, then a router over 5 experts writes its ids
    g2 = backend.graph()
    ids2 = backend.tensor(2, dtype=np.int32)
    g2.matvec_id(w, g2.input(backend.tensor(64)), ids2)
    from vkq.llama.vector_ops import ExpertRouting, Vectors
    op = ExpertRouting(backend.device, Vectors(g2.input(backend.tensor(5)), 5), ids2, backend.tensor(2), 2)
    with pytest.raises(ValueError, match=r"only an op that keeps them in \[0, 3\) by construction"):
        g2.add(op)


def test_ids_written_by_any_other_op_too_are_refused(backend):
    """One undeclared writer, in this graph or another, and the ids are unchecked: refused."""
    from vkq.llama.vector_ops import Argmax, Vectors

    w = upload(backend, 16, 64, seed=11, n_expert=3)
    ids = backend.tensor(1, dtype=np.int32)
    g, _ = routing_graph(backend, 3, ids)
    g.add(Argmax(backend.device, Vectors(g.input(backend.tensor(3)), 3), ids))
    with pytest.raises(ValueError, match="written on the device by an op that does not keep them"):
        g.matvec_id(w, g.input(backend.tensor(64)), ids)

    ids = backend.tensor(1, dtype=np.int32)
    g, logits = routing_graph(backend, 3, ids)
    g.matvec_id(w, g.input(backend.tensor(64)), ids)
    g.run()
    other = backend.graph()
    other.add(Argmax(backend.device, Vectors(other.input(backend.tensor(3)), 3), ids))
    with pytest.raises(RuntimeError, match="another graph writes it on the device"):
        g.run()


def test_bounded_ids_must_be_written_by_the_op(backend):
    class Liar:
        reads, writes = (), ()

        def __init__(self, t):
            self.bounded_ids = ((t, 3),)

        def record(self, seq):
            pass

    with pytest.raises(ValueError, match="must name int32 tensors it writes"):
        backend.graph().add(Liar(backend.tensor(2, dtype=np.int32)))
