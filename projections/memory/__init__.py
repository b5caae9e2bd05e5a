"""The memory as the projection serves it: its typed shape, the named read
queries over memories, and the back-chain heads.
"""
