"""Reading msprobe's files: dump.json, stack.json, the dump folders, the list of wrapped APIs.

Takes the paths a run was given; hands on `Dump` (an index of entries) and entry names. Every string
in a dump is untrusted text (untrusted.py). No pytest, no framework.
"""
