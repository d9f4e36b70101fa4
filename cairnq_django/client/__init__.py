"""What application code calls, one concern a file.

``submit`` (build, gate, insert, announce), ``queries`` (read, cancel, retry,
purge), ``wait`` (wait, call, outcome), ``async_api`` (the ``a*`` twins of all
three), ``backpressure`` (the submit gate), ``retention`` (purge rules), and
``schema_guard`` (the missing-tables error). ``cairnq_django`` re-exports the
public functions.
"""
