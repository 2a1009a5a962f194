"""The pytest side: the session, the items, selection (resume, baseline, --lf), the reporter and the
pytest-xdist workers. Hands pytest what the stages below decide; holds no logic of its own.
"""
