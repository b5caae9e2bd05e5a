"""Ranking memories: terms (text), BM25 over the postings, the hybrid fusion,
and the recall queries with every filter.
"""
