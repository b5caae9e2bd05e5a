"""The memory as the projection serves it: its fold (memories, their text
index, links, policies, atomisations, migrations), its typed shape, the named
read queries over memories, and the back-chain heads.
"""
