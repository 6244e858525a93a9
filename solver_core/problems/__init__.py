"""Decision problems as standalone instances for ``gpuplan solve`` (one module per problem).

Why a package of its own: the policies build their decisions from a cluster view; a solver
comparison needs the same decisions read from a file, validated field by field, and handed to
every solver -- MIP backends, dynamic programmes, heuristics -- with one result shape. Each
module offers ``load(data, source)`` (raises :class:`~gpuplan.models.InputError`), ``SOLVERS``,
``default_solvers()`` and ``run(instance, solver, limits) -> Outcome`` (:mod:`.common`), plus
``check(instance, solution)``, an independent feasibility check used by tests.
"""
