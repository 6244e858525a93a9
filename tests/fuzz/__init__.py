"""The fuzz suite (issue 23): hostile and malformed input of every kind the CLI reads.

Every case runs the real ``gpuplan`` command line (in-process under an alarm and a memory
watchdog, a few as real subprocesses) and is classified by :mod:`tests.fuzz.harness`:

* ``clean``: exit 0 and output that passes the sanity oracle (finite, non-negative metrics);
* ``refused``: exit 2 with exactly one line on stderr that names the file (or option) at fault;
* ``accepted-nonsense``: exit 0 with absurd output, or a corpus case that must be refused.

A hang (past the per-case timeout or memory growing without bound), a traceback, an internal
error (exit 1 or any other status) or a refusal of several lines or naming nothing fails the
case. Run one kind with ``pytest tests/fuzz -k scenario`` (kinds: scenario, state, solve,
sweep, trace, qps, cli, bytes, corpus). The hand-written hostile cases live in
``tests/fuzz_corpus/cases.yaml``.
"""
