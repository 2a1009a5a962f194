"""An entry's arguments as values: the dumped tensors (real data) or seeded random ones from the
recorded statistics. Takes a dump entry's specs; hands on arguments through a framework's codec. No pytest.
"""
