"""A subset of atomic-agents-stack 2.0.0 (MIT, see LICENSE beside this file).

Only the modules the vault interop tests run are here, unchanged; this
``__init__`` replaces the distribution's, which imports the whole agent
runtime and its model clients. See ../README.md.
"""
