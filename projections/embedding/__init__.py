"""Vectors in the projection: the embedders fold, memory and chunk vectors,
their index, and the embedding cache beside the database.
"""
