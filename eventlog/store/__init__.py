"""The log on disk: segments, the index hint, the writer lock, the writer and
its group commit, checkpoints, recovery and the reader; every file access
goes through the read guard (fsio).
"""
