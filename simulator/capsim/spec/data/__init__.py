"""Catalogue data shipped with capsim (YAML)."""
