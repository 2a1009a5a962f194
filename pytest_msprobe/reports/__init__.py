"""Results on their way out: the CSV pair of reports.md, the journal, the manifest, the terminal's
words, resume, baseline and the merge of shards. Takes `EntryResult`s; no pytest, no framework.
"""
