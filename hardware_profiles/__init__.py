"""GPU profiles shipped with capsim (YAML data; this file only makes the folder importable)."""
