"""Verifying a whole log: the sequential and hinted passes, the key schedule
and trust policies, and the back-chain fold.
"""
