"""The log format as pure functions: canonical CBOR, entries and their hashes,
keys and signatures, signed notes, Merkle trees and the heads map.
"""
