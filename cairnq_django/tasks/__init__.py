"""Declaring and running tasks: the registry, the handler's context, periodic schedules."""
