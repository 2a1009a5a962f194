"""Check one dump entry: rebuild its call, run both sides through its framework, judge every output.

Takes a `Dump` and an entry name; hands on an `EntryResult`. No pytest.
"""
