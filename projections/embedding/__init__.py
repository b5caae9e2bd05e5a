"""Vectors in the projection: memory and chunk vectors, their index, and the
embedding cache beside the database.
"""
