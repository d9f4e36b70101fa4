"""Interop tests against the real upstream ``cairnq`` SDK (see ``test_upstream``)."""
