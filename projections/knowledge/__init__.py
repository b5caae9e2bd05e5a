"""The knowledge loop's read model: its fold, its named queries, project
matching, pure rules (project names, confidence, decay) and the model-call
rows.
"""
