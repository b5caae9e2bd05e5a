"""Test helpers shared across packages (servers, fixtures)."""
