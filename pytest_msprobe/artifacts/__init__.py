"""What a run leaves beside its reports for a failing entry: the error data and a standalone
reproducer. Takes a checked entry's kept values; no pytest.
"""
