"""pytest-msprobe: an msprobe dump as a pytest suite, each API against a float64 CPU benchmark.

The package by stage, as the data flows; each folder imports only the folders below it
(pyproject.toml's import-linter contracts, checked in CI):

- plugin.py        the pytest11 entry point: the options, and a run of the dumps they name
- glue/            the pytest side: session, items, selection, reporter, xdist workers
- distributed/     hosts and device pools of a run over several machines, the workers' allocator
- checking/        one entry checked: both sides run, every output judged, within a time limit
- artifacts/       error data and standalone reproducers of the entries that are not pass
- reports/         the CSV pair, journal, manifest, terminal words, resume, baseline, merge
- frameworks/      PyTorch and MindSpore: an entry's call rebuilt and run on a device and as the bench
- judging/         metrics, and the standards that judge an output by them
- inputs/          an entry's arguments: the dumped tensors, or seeded random ones
- dumps/           dump.json, stack.json, the dump folders, msprobe's list of wrapped APIs
- options.py, results.py, untrusted.py: the settings, the results as data, text on its way out
"""

__version__ = "0.1.0"
