"""Tenancy: the scoped tokens a home issued and revoked (`fold.py`: the `tokens` table)."""
