"""The memory vocabulary: event type names, kinds, relations, which memories an
entry touches, upcasters; the knowledge loop's names beside them.
"""
