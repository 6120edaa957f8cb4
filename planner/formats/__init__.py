"""File formats: reading, validating and writing every document rota exchanges.

Tables, clusters, jobs, traces, schedules, state, progress. Depends only on planner.errors.
"""
