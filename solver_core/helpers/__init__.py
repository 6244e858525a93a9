"""Helpers shared by several policy families, outside the policies' folder.

:mod:`.ladders` (useful GPU counts per job), :mod:`.water_fill` (max-min water-filling),
:mod:`.ranked_queue` and :mod:`.running_order` (incrementally kept job orders). They declare
no policy and import no policy module: the registry never needs them, and a policy module
imports the ones it uses.
"""
