"""Workflows: chain, group, chord and named DAGs of tasks (docs/workflows.md).

A node waits in the app's own tables (``models.py``) until its parents have
ended; then its task row is inserted and any SDK's worker may run it.
``advance.py`` moves a run on when a node's task ends, exactly once, from
the settling worker's transaction or the sweeper's pass. ``workflow.py``
builds a DAG, ``canvas.py`` chain, group and chord over it, ``submit.py``
writes a run, ``run.py`` reads one back, ``batch.py`` follows the tasks
submitted in a ``with`` block, ``retention.py`` deletes finished runs whose
task rows are all purged. Entered through ``cairnq_django``
(``cairnq.Workflow``, ``cairnq.chain`` ...); this file imports nothing, so
``cairnq_django.models`` can register the tables without the rest.
"""
