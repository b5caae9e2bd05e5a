"""Others watching the log: the C2SP tlog-witness protocol, cosignatures, and
tlog-tiles publication paths.
"""
